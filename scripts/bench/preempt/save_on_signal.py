"""Time from SIGTERM to exit of a PyTorch job under ContraiCallback (the step under way finishes,
the Trainer's checkpoint and Contrai's record are written and sealed): the job started, SIGTERM
sent once its main phase has trained STEPS steps, the exit timed; RUNS times, the median printed.

    python scripts/bench/preempt/save_on_signal.py MODEL_DIR ../shared/data/spamassassin.jsonl [RUNS]
    python scripts/bench/preempt/save_on_signal.py --llm ../shared/data/spamassassin.jsonl [RUNS]

The first is `job.py` (MiniLM-L6, full fine-tune); `--llm` is `llm_job.py` (a SmolLM-135M-shaped
Llama with LoRA adapters).
"""

import json
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
RECIPE = """
[run]
eval_every = 50
checkpoint_every = 50
[validate]
steps = 5
batch = 8
lr = 1e-4
min_fall = 0.0
[main]
steps = 300
batch = 16
lr = 5e-5
[refine.distill]
enabled = false
"""


# The LLM job's recipe: LoRA on a random-weight LM cannot overfit one batch far (no validate).
LLM_RECIPE = """
[run]
phases = ["main"]
eval_every = 50
checkpoint_every = 50
[main]
steps = 300
batch = 4
lr = 2e-4
"""


def main_steps(run: Path) -> int:
    path = run / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum(1 for x in path.read_text().splitlines() if '"phase":"main"' in x and "train_loss" in x)


def once(model: str | None, data: str, steps: int) -> tuple[float, float]:
    """One run: of `job.py` on `model`, or of `llm_job.py` when `model` is None."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "recipe.toml").write_text(RECIPE if model is not None else LLM_RECIPE)
        argv = [str(HERE / "job.py"), model, data, str(out)] if model is not None else [str(HERE / "llm_job.py"), data, str(out)]
        job = subprocess.Popen([sys.executable, *argv],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while main_steps(out / "run") < steps:
            if job.poll() is not None:
                raise SystemExit(f"the job ended before {steps} main steps: {job.stderr.read()[-3000:] if job.stderr else ''}")
            time.sleep(0.05)
        sent = time.perf_counter()
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate()
        took = time.perf_counter() - sent
        if job.returncode != 128 + signal.SIGTERM or "written and sealed" not in err:
            raise SystemExit(f"exit {job.returncode}: {err[-3000:]}")
        ckpt = next((out / "trainer").glob("checkpoint-*"))
        size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file()) / 1e6
        walls = [json.loads(x)["wall_s"] for x in (out / "run" / "metrics.jsonl").read_text().splitlines()
                 if '"phase":"main"' in x and "train_loss" in x]
        step = statistics.median(b - a for a, b in zip(walls, walls[1:]))
        print(f"  a main step took {step:.2f} s (median)", flush=True)
        return took, size


def main() -> None:
    model: str | None = sys.argv[1] if sys.argv[1] != "--llm" else None
    data = sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    times = []
    for _ in range(runs):
        took, size = once(model, data, steps=12)
        times.append(took)
        print(f"signal to exit: {took:.2f} s (checkpoint {size:.0f} MB)", flush=True)
    print(f"median {statistics.median(times):.2f} s over {runs} runs; {cpu}")


if __name__ == "__main__":
    main()
