"""A Lightning job that a stop signal may interrupt, run as its own process (alone, or on two ranks
under torchrun with ``strategy="ddp"``): the MLP task of test_lightning under ContraiCallback,
resumed from the newest sealed stop checkpoint when there is one.

Arguments: OUT_DIR (holding recipe.toml), then ``kill=STEP`` (this process sends itself SIGTERM
during optimizer step STEP), ``kill-eval=N`` (... during the N-th evaluation-mode forward pass: an
evaluation under way) and ``rank=R`` (only rank R does).
"""

import os
import signal
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from conftest import dataset
from test_lightning import Mlp, task
from torch.utils.data import DataLoader

from contrai import DroppableDataset, ResumableLoader
from contrai.integrations.lightning import ContraiCallback, last_checkpoint

out = Path(sys.argv[1])
options = dict(o.split("=", 1) for o in sys.argv[2:])
ranks = int(os.environ.get("WORLD_SIZE", "1"))


class KillAt(pl.Callback):
    """SIGTERM to this process as optimizer step ``step`` begins."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: pl.Trainer, module: pl.LightningModule, batch: Any, i: int) -> None:
        if trainer.global_step + 1 == self.step and ("rank" not in options or int(options["rank"]) == trainer.global_rank):
            os.kill(os.getpid(), signal.SIGTERM)


callbacks: list[pl.Callback] = [ContraiCallback(out / "recipe.toml", out / "run", holdout_dataset=task(64, 3))]
if "kill" in options:
    callbacks.append(KillAt(int(options["kill"])))
module = Mlp()
if "kill-eval" in options and ("rank" not in options or int(options["rank"]) == int(os.environ.get("RANK", "0"))):
    evals = [0, int(options["kill-eval"])]

    def in_evaluation(m: torch.nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        if not m.training:
            evals[0] += 1
            if evals[0] == evals[1]:
                os.kill(os.getpid(), signal.SIGTERM)

    module.register_forward_hook(in_evaluation)
trainer = pl.Trainer(max_steps=110, accelerator="cpu", devices=ranks, strategy="ddp" if ranks > 1 else "auto",
                     callbacks=callbacks, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     num_sanity_val_steps=0, default_root_dir=str(out / "trainer"))
# Shuffled, and resumable mid-epoch: the resumed job draws the stopped epoch's order and skips what it trained.
trainer.fit(module, ResumableLoader(dataset(DroppableDataset(task(512, 1))), batch_size=16, shuffle=True),
            DataLoader(dataset(task(128, 2)), batch_size=32),
            ckpt_path=last_checkpoint(out / "trainer" / "checkpoints"))
