"""Contrai's lifecycle inside a Lightning ``Trainer``: one callback.

>>> trainer = L.Trainer(max_steps=..., callbacks=[ContraiCallback("recipe.toml", run_dir="runs/x")])

Batches are ``(inputs, labels)`` pairs the module's ``forward`` maps to logits, or dicts with
``labels`` that a Hugging Face model takes (pass ``forward=`` for other layouts). The module's
``training_step`` returns the loss (a tensor or a dict with ``loss``). The recipe governs the LR
(set before every optimizer step), the evaluation and checkpoint cadence and the phases.

Distributed (``strategy="ddp"``; tested under torchrun): rank 0 consults the conductor and writes
the run directory; every rank applies the same actions at the same step.
FSDP, model-parallel and DeepSpeed ZeRO-3 strategies shard parameters: a recipe that prunes is
refused there.

Resume: the conductor's state and the pruning masks ride in Lightning's checkpoints, so
``trainer.fit(..., ckpt_path=...)`` continues the lifecycle where it stopped. The losses after a
mid-epoch resume match the uninterrupted job's only when the data loader is resumable (Lightning's
own rule: a loader with ``state_dict``/``load_state_dict``, or an end-of-epoch checkpoint).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from .engine import Engine, Job, Outputs, per_sample, planned_steps, refuse_sharded_pruning

Forward = Callable[[torch.nn.Module, Any], tuple[torch.Tensor, torch.Tensor]]


def default_forward(model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and labels of a batch: ``(x, y)`` through ``model(x)``, or a dict with ``labels``
    through ``model(**inputs).logits``."""
    if isinstance(batch, dict):
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        out = model(**inputs)
        return getattr(out, "logits", out), batch["labels"]
    x, y = batch[0], batch[1]
    return model(x), y


def _to(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to(v, device) for v in batch)
    return batch


def _shards_parameters(strategy: Any) -> bool:
    """Whether the strategy splits parameters across ranks (FSDP, model parallel, ZeRO-3)."""
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

    return isinstance(strategy, (FSDPStrategy, ModelParallelStrategy)) or bool(getattr(strategy, "zero_stage_3", False))


class LightningJob(Job):
    """A running Lightning ``Trainer`` as the engine sees it."""

    def __init__(self, trainer: pl.Trainer, module: pl.LightningModule, forward: Forward, holdout: Any) -> None:
        self.trainer = trainer
        self.module = module
        self.forward = forward
        self.holdout = holdout
        self.rank = trainer.global_rank
        self.world = trainer.world_size
        loader = trainer.train_dataloader
        self.per_device_batch = getattr(loader, "batch_size", None) or 0
        self.effective_batch = self.per_device_batch * self.world * trainer.accumulate_grad_batches

    @property
    def model(self) -> torch.nn.Module:  # type: ignore[override]
        return self.module

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:  # type: ignore[override]
        opts = self.trainer.optimizers
        return opts[0] if opts else None

    def outputs(self, model: torch.nn.Module, batch: Any) -> Outputs:
        logits, labels = self.forward(model, _to(batch, self.module.device))
        return per_sample(logits, labels)

    def train_batch(self) -> Any:
        return next(iter(self.trainer.train_dataloader))

    def eval_batches(self) -> Any:
        loaders = self.trainer.val_dataloaders
        if isinstance(loaders, (list, tuple)):
            loaders = loaders[0]
        return loaders

    def train_rows(self) -> Iterator[tuple[list[int], Any]]:
        loader = self.trainer.train_dataloader
        ds = loader.dataset
        original = getattr(ds, "original", None)
        rows = [original(i) if original else ds[i] for i in range(len(ds))]
        plain = DataLoader(rows, batch_size=max(self.per_device_batch, 1) * 2, shuffle=False,
                           collate_fn=loader.collate_fn)
        start = 0
        for b in plain:
            n = len(b["labels"]) if isinstance(b, dict) else len(b[1])
            yield list(range(start, start + n)), b
            start += n

    def holdout_batches(self) -> Any:
        if self.holdout is None:
            return None
        loader = self.trainer.train_dataloader
        return DataLoader(self.holdout, batch_size=max(self.per_device_batch, 1) * 2, shuffle=False,
                          collate_fn=loader.collate_fn)

    def train_dataset(self) -> Any:
        return self.trainer.train_dataloader.dataset


class ContraiCallback(pl.Callback):
    """Runs Contrai's lifecycle in a Lightning ``Trainer``.

    Args:
        recipe: the recipe file (TOML).
        run_dir: the run directory to write.
        holdout_dataset: the holdout, evaluated once at the end.
        classes: classes of the task.
        forward: ``(module, batch) -> (logits, labels)`` for batch layouts other than ``(x, y)``
            and Hugging Face dicts.
        turn_log: under torch.distributed, a file each rank appends every turn it carried out to
            (to check that all ranks applied the same actions).
    """

    def __init__(self, recipe: str | os.PathLike[str], run_dir: str | os.PathLike[str], *,
                 holdout_dataset: Any = None, classes: int = 2, forward: Forward | None = None,
                 turn_log: str | os.PathLike[str] | None = None) -> None:
        from ._core import recipe_check

        self.recipe_path = os.fspath(recipe)
        self.recipe_toml = Path(recipe).read_text()
        recipe_check(self.recipe_toml, self.recipe_path)
        self.run_dir = Path(run_dir)
        self.holdout = holdout_dataset
        self.classes = classes
        self.forward = forward or default_forward
        self.turn_log = turn_log
        self.planned = 0  # optimizer steps the recipe plans (set when training starts)
        self.engine: Engine | None = None
        self._resume: dict[str, Any] | None = None
        self._grad_norm: float | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check(trainer)
        job = LightningJob(trainer, pl_module, self.forward, self.holdout)
        self.engine = Engine(job, self.run_dir, self.recipe_toml, self.recipe_path, self.classes,
                             turn_log=self.turn_log)
        self.engine.start(self._resume)
        self._after(trainer)

    def _check(self, trainer: pl.Trainer) -> None:
        """What the Trainer must give the recipe, each refusal saying what to set."""
        if not trainer.val_dataloaders:
            raise ValueError("ContraiCallback needs validation data: pass val_dataloaders= to fit() "
                             "(the conductor evaluates at the recipe's cadence, run.eval_every)")
        if _shards_parameters(trainer.strategy):
            refuse_sharded_pruning(self.recipe_toml, self.recipe_path, type(trainer.strategy).__name__)
        total = self.planned = planned_steps(self.recipe_toml, self.recipe_path)
        if trainer.max_steps != -1 and trainer.max_steps < total:
            raise ValueError(f"the recipe plans {total} optimizer steps but the Trainer stops at "
                             f"{trainer.max_steps}: set Trainer(max_steps={total}) — the lifecycle stops it itself")

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        """The conductor's LR for this step (after any scheduler), and the pre-clip gradient norm."""
        e = self.engine
        if e is not None and e.plan is not None:
            for g in optimizer.param_groups:
                g["lr"] = e.plan["lr"]
        norms = [p.grad.detach().norm() for p in pl_module.parameters() if p.grad is not None]
        self._grad_norm = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if trainer.fit_loop.epoch_loop._should_accumulate():
            return
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        value = float(loss.detach()) if isinstance(loss, torch.Tensor) else None
        self.engine.stepped(value, self._grad_norm)
        need = self.planned + self.engine.lost_steps
        if trainer.max_steps != -1 and trainer.max_steps < need:
            # Steps that failed or rollbacks took back: the plan still fits.
            trainer.fit_loop.epoch_loop.max_steps = need
        self._after(trainer)

    def _after(self, trainer: pl.Trainer) -> None:
        e = self.engine
        if e.failed is not None:
            raise RuntimeError(f"contrai: the run stopped: {e.failed}")
        if e.finished is not None:
            trainer.should_stop = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.engine is not None:
            self.engine.stopped_early(trainer.global_step, self.planned, "Trainer(max_steps={})")

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        e = self.engine
        if e is None or e.conductor is None:
            return
        # The conductor is between steps here: its state now is the checkpoint's.
        checkpoint["contrai"] = {"record": e.record_of(e.conductor.state()), "masks": e.masks.keep}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get("contrai")
        if saved is not None:
            self._resume = dict(saved["record"])
            self._resume["masks_keep"] = saved["masks"]


__all__ = ["ContraiCallback", "default_forward"]
