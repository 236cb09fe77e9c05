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

Resume: the callback's :meth:`~ContraiCallback.state_dict` (the conductor's state, the counters,
the pruning masks) is saved in Lightning's checkpoints, so ``trainer.fit(..., ckpt_path=...)``
continues the lifecycle where it stopped. The losses after a mid-epoch resume match the
uninterrupted job's when the train loader is resumable (Lightning's own rule: a loader with
``state_dict``/``load_state_dict``, such as :class:`contrai.ResumableLoader`), or the checkpoint
ends an epoch.

==================================  ==========================================  ==============================================
Lightning event                     sent to the conductor                       what the engine does
==================================  ==========================================  ==============================================
``load_state_dict`` (``fit`` with   —                                           keeps the checkpoint's record and masks for
``ckpt_path=``)                                                                 ``on_train_start``
``on_train_start``                  the run's facts (samples, classes, weight   warns when lightning is outside ``TESTED``;
                                    names, heads) to a fresh conductor, or the  refuses what the recipe cannot run with (no
                                    checkpoint's state on resume; then the      validation data, too few ``max_steps``,
                                    answer to each request until it asks to     pruning under a sharding strategy) and, by the
                                    train: ``PipelineChecked`` (validate),      pre-flight check, what would break the job
                                    ``RoundTripped``, ...                       (``preflight=``); carries out the turns
                                                                                (validate's one-batch check, the checkpoint
                                                                                round trip, ...)
``on_before_optimizer_step``        —                                           sets the conductor's LR in every parameter
                                                                                group; keeps the gradient norm before clipping;
                                                                                marks the batch as ending an optimizer step
``on_train_batch_end`` (a batch     ``Stepped`` (the batch's loss, pre-clip     applies the masks; writes the step's metrics
that ended an optimizer step)       grad norm, LR); then the answer to each     row; carries out the turn's actions (record,
                                    request of the turns that follow:           replan, phase, batch, dropout, drop samples,
                                    ``Evaluated``, ``Pruned``, ``Sensitivity``, checkpoint) and requests (evaluate, prune,
                                    ``JointLoss``, ``SampleLosses``,            measure, restore, export, quantize, read the
                                    ``Restored``, ``Exported``, ``Declined``    holdout, write ``eval.json``); raises the
                                    (distil), ``Quantized``, ``HoldoutRead``    fit loop's ``max_steps`` by the steps lost;
                                                                                ``trainer.should_stop`` at the end
``state_dict`` (Lightning saves a   —                                           the record (counters, journal lengths, the
checkpoint)                                                                     conductor's state) and the masks
``on_train_end``                    —                                           if the lifecycle did not finish: records an
                                                                                ``engine_substitute`` naming the ``max_steps``
                                                                                to set
==================================  ==========================================  ==============================================

Everything this module needs of the Trainer beyond its public API is in
``contrai.integrations._compat.lightning``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from contrai import _core
from contrai.engine.adapters import mark_merged
from contrai.engine.batches import StepBatches, watch
from contrai.engine.checkpoints import newest_verified
from contrai.engine.job import Job, OriginalRows, refuse_sharded_pruning
from contrai.engine.lora import train_also, trained_past_merge
from contrai.engine.model import unwrap
from contrai.integrations._compat import lightning as compat
from contrai.integrations.callback import LifecycleCallback
from contrai.integrations.trackers import Sink, lightning_sinks
from contrai.preempt import stopped
from contrai.preflight import Mode, facts_lightning, refuse_nothing_to_train
from contrai.resume import gathered, rng_states, set_rng_states

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


class LightningJob(Job):
    """A running Lightning ``Trainer`` as the engine sees it."""

    def __init__(self, trainer: pl.Trainer, module: pl.LightningModule, forward: Forward, holdout: Any) -> None:
        self.trainer = trainer
        self.module = module
        self.forward = forward
        self.holdout = holdout
        self.rank = trainer.global_rank
        self.world = trainer.world_size
        self.per_device_batch = getattr(self.loader(), "batch_size", None) or 0
        self.effective_batch = self.per_device_batch * self.world * trainer.accumulate_grad_batches

    @property
    def model(self) -> torch.nn.Module:  # type: ignore[override]
        return self.module

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:  # type: ignore[override]
        opts = self.trainer.optimizers
        return opts[0] if opts else None

    def schedulers(self) -> list[Any]:
        return [c.scheduler for c in self.trainer.lr_scheduler_configs]

    def logits(self, model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward(model, _to(batch, self.module.device))

    def loader(self) -> DataLoader[Any]:
        """The Trainer's train data loader."""
        loader: DataLoader[Any] | None = self.trainer.train_dataloader
        if loader is None:
            raise RuntimeError("the Lightning Trainer has no train data loader")
        return loader

    def in_order(self, dataset: Any) -> DataLoader[Any]:
        """``dataset`` in row order, in batches of twice the training batch, collated as training's are."""
        return DataLoader(dataset, batch_size=max(self.per_device_batch, 1) * 2, shuffle=False,
                          collate_fn=self.loader().collate_fn)

    def train_batch(self) -> Any:
        return next(iter(self.loader()))

    def eval_batches(self) -> Any:
        loaders = self.trainer.val_dataloaders
        if isinstance(loaders, (list, tuple)):
            loaders = loaders[0]
        return loaders

    def train_rows(self) -> Iterator[tuple[list[int], Any]]:
        start = 0
        for b in self.in_order(OriginalRows(self.loader().dataset)):
            n = len(b["labels"]) if isinstance(b, dict) else len(b[1])
            yield list(range(start, start + n)), b
            start += n

    def holdout_batches(self) -> Any:
        if self.holdout is None:
            return None
        return self.in_order(self.holdout)

    def train_dataset(self) -> Any:
        return self.loader().dataset

    def trackers(self) -> list[Sink]:
        return lightning_sinks(self.trainer)

    def logged_step(self) -> int:
        return self.trainer.global_step


class ContraiCallback(LifecycleCallback, pl.Callback):
    """Runs Contrai's lifecycle in a Lightning ``Trainer`` (pass it in ``callbacks=``: Lightning
    hands every hook its Trainer). Its state rides in Lightning's checkpoints through
    :meth:`state_dict` and :meth:`load_state_dict`.

    Args:
        recipe: the recipe file (TOML).
        run_dir: the run directory to write.
        holdout_dataset: the holdout, evaluated once at the end.
        classes: classes of the task.
        forward: ``(module, batch) -> (logits, labels)`` for batch layouts other than ``(x, y)``
            and Hugging Face dicts.
        turn_log: under torch.distributed, a file each rank appends every turn it carried out to
            (to check that all ranks applied the same actions).
        preflight: the pre-flight check before step 1 (``contrai.preflight``; the schedule and
            checkpoint cadence judged are the recipe's): ``"stop"`` refuses a job with an error
            finding, naming each, and says the warnings; ``"warn"`` says them all and trains;
            ``"off"`` skips it.
    """

    START_HOOK = "on_train_start"
    MAX_STEPS = "Trainer(max_steps={})"

    def __init__(self, recipe: str | os.PathLike[str], run_dir: str | os.PathLike[str], *,
                 holdout_dataset: Any = None, classes: int = 2, forward: Forward | None = None,
                 turn_log: str | os.PathLike[str] | None = None, preflight: Mode = "stop") -> None:
        super().__init__(recipe, run_dir, holdout_dataset=holdout_dataset, classes=classes, turn_log=turn_log,
                         preflight=preflight)
        self.forward = forward or default_forward
        self._resume: dict[str, Any] | None = None
        self._grad_norm: float | None = None
        self._optimizer_stepped = False
        self._stop_file: Path | None = None
        self._rng: list[dict[str, Any]] | None = None
        self._batches = StepBatches()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Before Lightning makes the optimizer: a module with nothing to train is refused."""
        if stage == "fit":
            refuse_nothing_to_train(pl_module)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A LoRA job resumed from a checkpoint written past main, before Lightning loads its
        optimizer: the module's weights came back merged (Lightning saves every one) with the
        adapters beside them, so the LoRA layers are marked merged and the merged matrices get
        their optimizer group as the engine added it — then the saved optimizer loads."""
        if not (self._resume or {}).get("merged"):
            return
        model = unwrap(pl_module)
        names = trained_past_merge(model, self.recipe_toml, self.recipe_path)
        mark_merged(model)
        train_also(model, trainer.optimizers[0] if trainer.optimizers else None,
                   [c.scheduler for c in trainer.lr_scheduler_configs], names)
        print(f"[contrai] resume past the LoRA merge: adapters marked merged, {len(names)} merged or pruned "
              "matrices train in their own group")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        compat.check()
        self._check(trainer)
        self._gate(facts_lightning(trainer, pl_module), speak=trainer.is_global_zero)
        job = LightningJob(trainer, pl_module, self.forward, self.holdout)
        self._new_engine(job, self.classes or 2).start(self._resume)
        self._batches = StepBatches()
        self._going()
        self._after(trainer)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.engine is not None:
            watch(self.engine.job.train_dataset())

    def _check(self, trainer: pl.Trainer) -> None:
        """What the Trainer must give the recipe, each refusal saying what to set."""
        if not trainer.val_dataloaders:
            raise ValueError("ContraiCallback needs validation data: pass val_dataloaders= to fit() "
                             "(the conductor evaluates at the recipe's cadence, run.eval_every)")
        if compat.shards_parameters(trainer.strategy):
            refuse_sharded_pruning(self.recipe_toml, self.recipe_path, type(trainer.strategy).__name__)
        limited = trainer.max_steps != -1
        self._plan(trainer.max_steps if limited else compat.epoch_steps(trainer), trainer.max_steps if limited else None)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        """The conductor's LR for this step (after any scheduler), and the pre-clip gradient norm;
        the batch under way ends an optimizer step (not one that only accumulates)."""
        e = self._running()
        if e.plan is not None:
            for g in optimizer.param_groups:
                g["lr"] = e.plan["lr"]
        norms = [p.grad.detach().norm() for p in pl_module.parameters() if p.grad is not None]
        self._grad_norm = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else None
        self._optimizer_stepped = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        """An optimizer step ended with this batch: the conductor is told, its turns carried out."""
        if not self._optimizer_stepped:
            return
        self._optimizer_stepped = False
        e = self._running()
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        value = float(loss.detach()) if isinstance(loss, torch.Tensor) else None
        rows, length = self._batches.take(e.job.world, e.job.all_reduce)
        e.stepped(value, self._grad_norm, rows, length)
        # Steps that failed or rollbacks took back: the plan still fits.
        compat.extend_max_steps(trainer, self.planned + e.lost_steps)
        self._after(trainer)
        self._stop_if_signalled(trainer)

    def _stop_if_signalled(self, trainer: pl.Trainer) -> None:
        """A stop signal any rank got (the ranks agree at every step): Lightning's checkpoint of
        this step (the lifecycle's state in it) written by every rank's ``save_checkpoint`` into a
        directory of its own, sealed, and the fit stopped; the job exits in ``on_train_end``."""
        if not self._agreed_stop():
            return
        folder = stop_dir(trainer) / f"stop-step={trainer.global_step}"
        self._stop_file = folder / "last.ckpt"
        trainer.save_checkpoint(self._stop_file)
        if trainer.is_global_zero:
            _core.seal(folder)
        trainer.should_stop = True

    def _after(self, trainer: pl.Trainer) -> None:
        """Carries the engine's state to the Trainer: a failure raised, the end a stop."""
        if self._raise_if_failed().finished is not None:
            trainer.should_stop = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        e = self._finish(trainer.global_step)
        if e is not None and e.stopped_by is not None and self._stop_file is not None:
            raise stopped(e.stopped_by, trainer.global_step, str(self._stop_file),
                          f"the script resumes with trainer.fit(..., ckpt_path={str(self._stop_file)!r}), or "
                          "ckpt_path=contrai.integrations.lightning.last_checkpoint("
                          f"{str(self._stop_file.parent.parent)!r})")

    def state_dict(self) -> dict[str, Any]:
        """What Lightning's checkpoint keeps of the lifecycle: the engine's record (counters, journal
        lengths, the conductor's state, which is the checkpoint's: Lightning saves between steps)
        and the pruning masks. Empty before training starts and on ranks other than 0 (Lightning
        writes rank 0's)."""
        e = self.engine
        if e is None:
            return {}
        # Every rank's generators, gathered on all (Lightning keeps rank 0's state_dict).
        rng = gathered(rng_states(), e.job.world)
        if e.conductor is None:
            return {}
        e.last_record = e.record_of(e.conductor.state())
        return {"record": e.resume_record(), "masks": dict(e.masks.keep), "rng": rng}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The lifecycle's state from the checkpoint Lightning resumes from (``fit(ckpt_path=)``):
        the conductor, the counters and the masks continue from it when training starts."""
        if state_dict:
            record = _core.checkpoint_record(state_dict["record"], "the Lightning checkpoint's ContraiCallback state")
            self._resume = {**record, "masks_keep": state_dict["masks"]}
        else:
            self._resume = None
        self._rng = state_dict.get("rng") if state_dict else None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        """The batch's rows and tokens kept for its step. The first step after a resume draws from
        the generators the stopped job had: they are put back once its batch is drawn (as they
        were when the checkpoint was written)."""
        if self.engine is not None:
            self._batches.add(self.engine.job.train_dataset(), batch)
        rng, self._rng = self._rng, None
        if rng is None:
            return
        if len(rng) != trainer.world_size:
            print(f"[contrai] the checkpoint kept the generators of {len(rng)} ranks, this job has "
                  f"{trainer.world_size}: dropout and sampling draw new streams from here")
            return
        set_rng_states(rng[trainer.global_rank])


def stop_dir(trainer: pl.Trainer) -> Path:
    """Where a stop checkpoint goes: the ``ModelCheckpoint``'s folder when the Trainer has one with
    a folder, else ``default_root_dir/checkpoints``."""
    callback = trainer.checkpoint_callback
    folder = getattr(callback, "dirpath", None)
    return Path(folder) if folder else Path(trainer.default_root_dir) / "checkpoints"


def last_checkpoint(folder: str | os.PathLike[str]) -> str | None:
    """The newest stop checkpoint under ``folder`` (``stop-step=N/last.ckpt``) whose files match
    their sums, for ``trainer.fit(..., ckpt_path=...)``; ``None`` when there is none — so one
    script serves the first run and every requeue. One that fails its sums is passed over, said on
    the log."""
    found = [(int(p.name.split("=", 1)[1]), p) for p in Path(folder).glob("stop-step=*")
             if p.is_dir() and p.name.split("=", 1)[1].isdigit()]
    newest = newest_verified(found)
    return None if newest is None else str(newest / "last.ckpt")


__all__ = ["ContraiCallback", "default_forward", "last_checkpoint"]
