"""Time from SIGTERM to exit of a PyTorch job under ContraiCallback (the step under way finishes,
the Trainer's checkpoint and Contrai's record are written and sealed): `job.py` started, SIGTERM
sent once its main phase has trained STEPS steps, the exit timed; RUNS times, the median printed.

    python scripts/bench/preempt/save_on_signal.py MODEL_DIR ../shared/data/spamassassin.jsonl
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


def main_steps(run: Path) -> int:
    path = run / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum(1 for x in path.read_text().splitlines() if '"phase":"main"' in x and "train_loss" in x)


def once(model: str, data: str, steps: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "recipe.toml").write_text(RECIPE)
        job = subprocess.Popen([sys.executable, str(HERE / "job.py"), model, data, str(out)],
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
        return took, size


def main() -> None:
    model, data = sys.argv[1], sys.argv[2]
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
