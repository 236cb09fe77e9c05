"""torchrun with two processes (gloo, CPU), a Hugging Face and a Lightning job: rank 0 consults
the conductor, every turn reaches both ranks before either acts, both apply identical actions at
identical steps, and one run directory is written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HF_RECIPE, require

require("torch", "transformers", "accelerate", "lightning")

from test_lightning import RECIPE

HERE = Path(__file__).parent


TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
needs_torchrun = pytest.mark.skipif(not Path(TORCHRUN).exists(), reason="torchrun is not installed")


def torchrun(job: str, recipe: str, out: Path, port: int, *args: str) -> None:
    """``job`` on two ranks (gloo, one thread each) with ``recipe`` as out/recipe.toml, its
    output in ``out``."""
    (out / "recipe.toml").write_text(recipe)
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([TORCHRUN, "--nproc_per_node", "2", "--master_port", str(port), str(HERE / job), str(out), *args],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def same_turns(out: Path) -> None:
    turns = [(out / f"turns.rank{r}").read_text().splitlines() for r in (0, 1)]
    assert turns[0] and turns[0] == turns[1], "both ranks carried out the same turns"


@needs_torchrun
def test_two_ranks_apply_the_same_turns_and_write_one_run_directory(tmp_path: Path) -> None:
    torchrun("ddp_job.py", HF_RECIPE, tmp_path, 29531)
    same_turns(tmp_path)
    kinds = [json.loads(x)["kind"] for x in (tmp_path / "run" / "decisions.jsonl").read_text().splitlines()]
    assert kinds[-1] == "holdout" and "enter_contract" in kinds
    assert (tmp_path / "run" / "final" / "eval.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["run", "trainer"], "one run directory"
    assert (tmp_path / "weights.rank0").read_text() == (tmp_path / "weights.rank1").read_text()


@needs_torchrun
def test_a_rollback_reaches_every_rank_from_rank_0s_checkpoint(tmp_path: Path) -> None:
    # A NaN loss at the 50th training step (every rank) rolls back to the latest checkpoint. Rank 1
    # gets a run directory of its own, as on a node without rank 0's disk: it must neither need
    # rank 0's checkpoint files nor write anything there.
    torchrun("ddp_job.py", HF_RECIPE, tmp_path, 29533, "node-local", "nan-at=50")
    same_turns(tmp_path)
    kinds = [json.loads(x)["kind"] for x in (tmp_path / "run" / "decisions.jsonl").read_text().splitlines()]
    assert "rollback_nonfinite" in kinds and kinds[-1] == "holdout", kinds
    restores = [t for t in (tmp_path / "turns.rank1").read_text().splitlines() if '"Restore"' in t]
    assert restores, "rank 1 carried out the restore"
    assert (tmp_path / "weights.rank0").read_text() == (tmp_path / "weights.rank1").read_text(), \
        "both ranks hold the restored and retrained weights"
    assert not (tmp_path / "node1").exists(), "rank 1 wrote nothing of the run directory"


@needs_torchrun
def test_a_lightning_ddp_job_applies_every_action_on_both_ranks(tmp_path: Path) -> None:
    torchrun("lightning_ddp_job.py", RECIPE, tmp_path, 29532)
    same_turns(tmp_path)
    run = tmp_path / "run"
    decisions = [json.loads(x) for x in (run / "decisions.jsonl").read_text().splitlines()]
    kinds = [d["kind"] for d in decisions]
    for k in ["validate_passed", "drop_noisiest", "enter_contract", "enter_refine", "holdout"]:
        assert k in kinds, f"{k} missing from {kinds}"
    models = [json.loads((tmp_path / f"model.rank{r}").read_text()) for r in (0, 1)]
    assert models[0]["weights"] == models[1]["weights"], "the ranks' pruned weights are identical"
    assert models[0]["dropout"] == models[1]["dropout"] == pytest.approx(0.1), "dropout × 0.5 on both"
    sparsity = json.loads((run / "final" / "eval.json").read_text())["sparsity"]["net.0"]
    assert sparsity > 0 and models[0]["sparsity"] == pytest.approx(sparsity, abs=1e-9)
    dropped = {int(i) for i in next(d for d in decisions if d["kind"] == "drop_noisiest")["evidence"]["ids"]}
    for m in models:
        assert set(m["dropped"]) == dropped and m["served_after_drop"], "each rank dropped the same ids"
        assert not dropped & set(m["served_after_drop"]), "no rank trains on a dropped sample"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["run"], "one run directory"
