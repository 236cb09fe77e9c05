"""Runs where they live: a real W&B run (``wandb`` in offline mode, from a Hugging Face Trainer
job's ``report_to``) read by the doctor, which must find in it what it finds in the same job's
Trainer state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import require, tiny_bert, token_task

require("torch", "transformers", "accelerate", "wandb")

from transformers import Trainer, TrainingArguments

import contrai


def findings(runs: list[dict[str, Any]]) -> list[tuple[str, int | None, str]]:
    return sorted((f["label"], f.get("step"), f["severity"]) for run in runs for f in run["findings"])


def test_a_wandb_run_of_a_trainer_job_reads_as_its_trainer_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Offline and quiet: no account, no network; the run lands in tmp_path/wandb.
    for k, v in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path),
                 "WANDB_PROJECT": "contrai-test", "WANDB_DISABLE_GIT": "true"}.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "out"
    # A constant LR to the end: a finding both records must show at the same step.
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=16, per_device_eval_batch_size=32,
                             max_steps=120, learning_rate=2e-3, lr_scheduler_type="constant", logging_steps=5,
                             eval_strategy="steps", eval_steps=20, save_strategy="steps", save_steps=120,
                             report_to=["wandb"], run_name="tiny-bert", use_cpu=True, seed=0, disable_tqdm=True)
    trainer = Trainer(model=tiny_bert(), args=args, train_dataset=token_task(512, 1), eval_dataset=token_task(128, 2))
    trainer.train()
    import wandb

    wandb.finish()
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1, runs
    from_wandb = contrai.doctor(tmp_path / "wandb")
    from_state = contrai.doctor(out / "checkpoint-120" / "trainer_state.json")
    assert [r["name"] for r in from_wandb] == ["tiny-bert"], "named by its run record"
    assert any(f[0] == "lr_no_decay" for f in findings(from_wandb)), findings(from_wandb)
    assert findings(from_wandb) == findings(from_state)
