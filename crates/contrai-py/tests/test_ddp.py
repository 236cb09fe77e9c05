"""torchrun with two processes (gloo, CPU): rank 0 consults the conductor, every turn reaches
both ranks before either acts, both apply identical actions at identical steps, and one run
directory is written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.skipif(shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists(),
                    reason="torchrun is not installed")
def test_two_ranks_apply_the_same_turns_and_write_one_run_directory(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", "29531", str(HERE / "ddp_job.py"),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    turns = [(tmp_path / f"turns.rank{r}").read_text().splitlines() for r in (0, 1)]
    assert turns[0] and turns[0] == turns[1], "both ranks carried out the same turns"
    kinds = [json.loads(x)["kind"] for x in (tmp_path / "run" / "decisions.jsonl").read_text().splitlines()]
    assert kinds[-1] == "holdout" and "enter_contract" in kinds
    assert (tmp_path / "run" / "final" / "eval.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["run", "trainer"], "one run directory"
