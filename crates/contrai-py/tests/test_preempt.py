"""Preemption in a PyTorch job: a stop signal at a step, mid-evaluation, or on one rank of two
stops the job after the step under way with a sealed checkpoint and exit status 128 + n; the
same script run again resumes from it, and every step trains on exactly the loss the
uninterrupted job had."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HF_RECIPE, dataset, require

require("torch", "transformers", "accelerate", "lightning")

import torch
from test_ddp import TORCHRUN, needs_torchrun
from test_lightning import RECIPE as LIGHTNING_RECIPE

import contrai
from contrai import ResumableLoader
from contrai._core import CorruptCheckpoint, RunLock
from contrai.integrations.hf import last_checkpoint
from contrai.integrations.lightning import last_checkpoint as last_lightning_checkpoint

HERE = Path(__file__).parent
SIGTERM_EXIT = 128 + 15


def job(out: Path, *options: str, ranks: int = 1, port: int = 0,
        script: str = "preempt_job.py", recipe: str = HF_RECIPE) -> subprocess.CompletedProcess[str]:
    """``script`` (the HF job, or the Lightning one) on ``out`` with ``recipe``, alone or on
    ``ranks`` ranks under torchrun (gloo)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.toml").write_text(recipe)
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    argv = [str(HERE / script), str(out), *options]
    cmd = ([TORCHRUN, "--nproc_per_node", str(ranks), "--master_port", str(port), *argv] if ranks > 1
           else [sys.executable, *argv])
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def losses(out: Path) -> dict[int, float]:
    """The training loss of every lifecycle step the run directory recorded."""
    rows = [json.loads(x) for x in (out / "run" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r["train_loss"] for r in rows if "train_loss" in r}


def decisions(out: Path) -> list[tuple[int, str]]:
    rows = [json.loads(x) for x in (out / "run" / "decisions.jsonl").read_text().splitlines() if x.strip()]
    return [(d["step"], d["kind"]) for d in rows]


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted job."""
    out = tmp_path_factory.mktemp("whole")
    done = job(out)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def stopped_then_resumed(out: Path, *options: str, ranks: int = 1, port: int = 0, code: int = SIGTERM_EXIT) -> str:
    """The job stopped by a signal (exit status ``code`` on one process), then the same command
    again; the stopped run's stderr."""
    first = job(out, *options, ranks=ranks, port=port)
    assert first.returncode != 0, "the signal stopped the job"
    if ranks == 1:
        assert first.returncode == code, first.stderr[-4000:]
    ckpt = last_checkpoint(out / "trainer")
    assert ckpt is not None, first.stderr[-4000:]
    contrai_record = json.loads((Path(ckpt) / "contrai.json").read_text())
    assert (Path(ckpt) / "SHA256SUMS").exists() and contrai_record["step"] > 0
    second = job(out, ranks=ranks, port=port + 1 if port else 0)
    assert second.returncode == 0, second.stderr[-4000:]
    return first.stderr


def test_sigterm_mid_step_stops_after_it_and_the_resumed_job_trains_exactly_as_the_whole(
        tmp_path: Path, whole: Path) -> None:
    step = random.Random(28).randint(25, 55)  # within main
    err = stopped_then_resumed(tmp_path, f"kill={step}")
    assert f"stopped by SIGTERM after step {step}:" in err, err[-3000:]
    assert "preempt_job.py" in err and "resume_from_checkpoint" in err, "the command that resumes it is printed"
    assert losses(tmp_path) == losses(whole)
    assert decisions(tmp_path) == decisions(whole)
    assert (tmp_path / "run" / "final" / "eval.json").exists()


def stopped(out: Path, step: int) -> Path:
    """The job stopped by SIGTERM at ``step``; its checkpoint."""
    done = job(out, f"kill={step}")
    assert done.returncode == SIGTERM_EXIT, done.stderr[-3000:]
    ckpt = last_checkpoint(out / "trainer")
    assert ckpt is not None and ckpt.endswith(f"checkpoint-{step}")
    return Path(ckpt)


def test_a_resume_inside_a_later_epoch_is_certified_and_a_changed_order_is_caught(tmp_path: Path) -> None:
    # 400 rows in batches of 16: 25 steps an epoch; step 37 is the 12th of epoch 1.
    ckpt = stopped(tmp_path, 37)
    record = json.loads((ckpt / "contrai.json").read_text())
    assert record["order"] == [{"epoch": 1, "count": 12, "chain": record["order"][0]["chain"], "changed": False}]
    assert record["next_lr"] > 0 and len(record["rng"]) == 1
    changed = job(tmp_path, "data_seed=7")
    assert changed.returncode != 0
    assert "resume: the resumed job's loader orders epoch 1 differently" in changed.stderr, changed.stderr[-3000:]
    again = job(tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resume certified before its first step: epoch 1's first 12 batches" in again.stdout, again.stdout[-3000:]


def test_a_checkpoint_without_its_rng_file_is_repaired(tmp_path: Path, whole: Path) -> None:
    ckpt = stopped(tmp_path, 41)
    (ckpt / "rng_state.pth").unlink()
    contrai._core.seal(ckpt)
    done = job(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "random generators at the first resumed step were not the checkpoint's" in done.stdout, done.stdout[-3000:]
    assert losses(tmp_path) == losses(whole), "dropout drew the stopped job's stream"


def test_a_signal_during_an_evaluation_stops_after_it(tmp_path: Path, whole: Path) -> None:
    # Evaluation-mode forward passes: validate's 20 one-batch steps, its evaluation (4 batches),
    # the round trip (2); then 4 per evaluation of main, every 10 steps: the 40th is inside one.
    err = stopped_then_resumed(tmp_path, "kill-eval=40", "signal=SIGUSR1", code=128 + 10)
    assert "SIGUSR1 received" in err and "stopped by SIGUSR1 after step" in err, err[-3000:]
    assert losses(tmp_path) == losses(whole)


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    done = job(tmp_path, "kill=30", "twice=1")
    assert done.returncode == SIGTERM_EXIT, done.stderr[-3000:]
    assert "second stop signal (SIGTERM): exiting now" in done.stderr
    assert "stopped by" not in done.stderr, "no checkpoint was waited for"


def test_a_checkpoint_that_fails_its_sums_is_passed_over(tmp_path: Path) -> None:
    done = job(tmp_path, "kill=33")
    assert done.returncode == SIGTERM_EXIT
    newest = last_checkpoint(tmp_path / "trainer")
    assert newest is not None and newest.endswith("checkpoint-33")
    weights = next(p for p in Path(newest).iterdir() if p.name.startswith("model"))
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    with pytest.raises(CorruptCheckpoint):
        contrai._core.verify(newest)
    older = last_checkpoint(tmp_path / "trainer")
    assert older is not None and int(older.rsplit("-", 1)[1]) < 33, older


def test_one_process_writes_a_run_directory(tmp_path: Path) -> None:
    held = RunLock(tmp_path / "run")
    try:
        done = job(tmp_path)
        assert done.returncode != 0
        assert f"process {os.getpid()}" in done.stderr, done.stderr[-2000:]
        assert not (tmp_path / "run" / "metrics.jsonl").exists(), "the job wrote nothing there"
    finally:
        held.release()


@needs_torchrun
def test_a_signal_on_one_rank_stops_both_and_the_resume_is_exact(tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    done = job(whole, ranks=2, port=29541)
    assert done.returncode == 0, done.stderr[-4000:]
    cut = tmp_path / "cut"
    err = stopped_then_resumed(cut, "kill=37", "rank=1", ranks=2, port=29543)
    assert "stopped by SIGTERM after step 37" in err, err[-4000:]
    assert losses(cut) == losses(whole)
    assert decisions(cut) == decisions(whole)
    shutil.rmtree(whole / "trainer", ignore_errors=True)


def test_a_lightning_job_stopped_by_sigterm_resumes_from_its_sealed_checkpoint(tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    done = job(whole, script="preempt_lightning_job.py", recipe=LIGHTNING_RECIPE)
    assert done.returncode == 0, done.stderr[-4000:]
    cut = tmp_path / "cut"
    step = random.Random(29).randint(33, 63)  # inside the second epoch
    first = job(cut, f"kill={step}", script="preempt_lightning_job.py", recipe=LIGHTNING_RECIPE)
    assert first.returncode == SIGTERM_EXIT, first.stderr[-4000:]
    assert f"stopped by SIGTERM after step {step}:" in first.stderr and "ckpt_path=" in first.stderr, first.stderr[-3000:]
    ckpt = last_lightning_checkpoint(cut / "trainer" / "checkpoints")
    assert ckpt is not None and Path(ckpt).parent.name == f"stop-step={step}"
    second = job(cut, script="preempt_lightning_job.py", recipe=LIGHTNING_RECIPE)
    assert second.returncode == 0, second.stderr[-4000:]
    assert decisions(cut) == decisions(whole)
    # Stopped mid-epoch (32 batches an epoch): the resumed job's loader draws the stopped epoch's
    # order and passes over the batches trained, so every step trains as in the whole job.
    assert "not resumable" not in second.stderr, second.stderr[-3000:]
    assert losses(cut) == losses(whole)


def test_a_lightning_ddp_job_signalled_on_one_rank_resumes_mid_epoch_exactly(tmp_path: Path) -> None:
    # Two gloo ranks: Lightning rebuilds the ResumableLoader with a DistributedSampler; a SIGTERM to
    # rank 1 alone stops both at the same step, and the resumed job trains every step as the whole.
    whole = tmp_path / "whole"
    done = job(whole, ranks=2, port=29561, script="preempt_lightning_job.py", recipe=LIGHTNING_RECIPE)
    assert done.returncode == 0, done.stderr[-4000:]
    cut = tmp_path / "cut"
    step = random.Random(30).randint(17, 31)  # inside the second epoch (16 batches an epoch a rank)
    first = job(cut, f"kill={step}", "rank=1", ranks=2, port=29563, script="preempt_lightning_job.py",
                recipe=LIGHTNING_RECIPE)
    assert first.returncode != 0 and f"stopped by SIGTERM after step {step}:" in first.stderr, first.stderr[-4000:]
    second = job(cut, ranks=2, port=29565, script="preempt_lightning_job.py", recipe=LIGHTNING_RECIPE)
    assert second.returncode == 0, second.stderr[-4000:]
    assert "not resumable" not in second.stderr, second.stderr[-3000:]
    assert losses(cut) == losses(whole)
    assert decisions(cut) == decisions(whole)


def test_a_lightning_job_signalled_during_an_evaluation_stops_after_it_and_resumes_exactly(tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    assert job(whole, script="preempt_lightning_job.py", recipe=LIGHTNING_RECIPE).returncode == 0
    cut = tmp_path / "cut"
    # Evaluation-mode forward passes: validate's, then 4 per evaluation of main every 10 steps.
    first = job(cut, "kill-eval=40", script="preempt_lightning_job.py", recipe=LIGHTNING_RECIPE)
    assert first.returncode == SIGTERM_EXIT, first.stderr[-4000:]
    assert "stopped by SIGTERM after step" in first.stderr, first.stderr[-3000:]
    second = job(cut, script="preempt_lightning_job.py", recipe=LIGHTNING_RECIPE)
    assert second.returncode == 0, second.stderr[-4000:]
    assert losses(cut) == losses(whole)
    assert decisions(cut) == decisions(whole)


@pytest.mark.parametrize("own_generator", [False, True])
def test_a_resumable_loader_continues_its_epoch_from_its_state(own_generator: bool) -> None:
    """Stopped three batches into its third epoch, a loader built afresh (torch's generator
    elsewhere, as in a new process) and given its state hands out the rest of that epoch."""
    def loader() -> ResumableLoader:
        g = torch.Generator().manual_seed(3) if own_generator else None
        return ResumableLoader(dataset(list(range(40))), batch_size=4, shuffle=True, generator=g)

    torch.manual_seed(0)
    first = loader()
    for _ in range(2):
        list(first)
    it = iter(first)
    trained = [next(it) for _ in range(3)]
    state = first.state_dict()
    rest = [b.tolist() for b in it]
    torch.manual_seed(123)
    second = loader()
    second.load_state_dict(state)
    assert state["batches"] == 3 and len(trained) == 3
    assert [b.tolist() for b in second] == rest
    assert len(list(second)) == 10, "the epoch after is whole"
