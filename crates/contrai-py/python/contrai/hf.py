"""Contrai's lifecycle inside a Hugging Face ``Trainer``: one callback.

>>> trainer = Trainer(model=model, args=args, train_dataset=DroppableDataset(train),
...                   eval_dataset=val, callbacks=[ContraiCallback("recipe.toml", run_dir="runs/x")])

The recipe governs the run: its phases, its LR schedule (the Trainer's scheduler is overridden
step by step), its evaluation and checkpoint cadence. Every step's loss and gradient norm and
every evaluation go to the conductor; its decisions are carried out in the running job, and the
run directory is written as the job goes (``contrai doctor`` / ``contrai report`` read it).
"""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback

from .engine import KEEP_LAST, Engine, Job, Outputs, per_sample, planned_steps, refuse_sharded_pruning


class _Rows:
    """The train dataset as it was given, whatever was dropped (per-sample losses see all)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:
        original = getattr(self.dataset, "original", None)
        return original(i) if original else self.dataset[i]


class HfJob(Job):
    """A running ``Trainer`` as the engine sees it."""

    def __init__(self, trainer: Trainer, train_dataloader: DataLoader, holdout: Any) -> None:
        self.trainer = trainer
        self.loader = train_dataloader
        self.holdout = holdout
        args = trainer.args
        self.rank = args.process_index
        self.world = args.world_size
        self.per_device_batch = args.per_device_train_batch_size
        self.effective_batch = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps

    @property
    def model(self) -> torch.nn.Module:  # type: ignore[override]
        return self.trainer.model

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:  # type: ignore[override]
        return self.trainer.optimizer

    def outputs(self, model: torch.nn.Module, batch: Any) -> Outputs:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        logits = model(**inputs).logits
        return per_sample(logits, batch["labels"])

    def train_batch(self) -> Any:
        return next(iter(self.loader))

    def eval_batches(self) -> Any:
        return self.trainer.get_eval_dataloader()

    def train_rows(self) -> Iterator[tuple[list[int], Any]]:
        ds = _Rows(self.loader.dataset)
        bs = self.trainer.args.per_device_eval_batch_size
        loader = DataLoader(ds, batch_size=bs, shuffle=False, collate_fn=self.loader.collate_fn)
        start = 0
        for b in loader:
            b = self.trainer._prepare_inputs(b)
            n = len(b["labels"])
            yield list(range(start, start + n)), b
            start += n

    def holdout_batches(self) -> Any:
        if self.holdout is None:
            return None
        bs = self.trainer.args.per_device_eval_batch_size
        loader = DataLoader(self.holdout, batch_size=bs, shuffle=False, collate_fn=self.loader.collate_fn)
        return (self.trainer._prepare_inputs(b) for b in loader)

    def train_dataset(self) -> Any:
        return self.loader.dataset


def _zero3(trainer: Trainer) -> bool:
    """Whether DeepSpeed shards the parameters (ZeRO stage 3)."""
    plugin = getattr(getattr(trainer, "accelerator", None), "state", None)
    ds = getattr(plugin, "deepspeed_plugin", None)
    return ds is not None and getattr(ds, "zero_stage", 0) == 3


def _find_trainer() -> Trainer | None:
    """The ``Trainer`` being constructed (``on_init_end`` is called from its ``__init__``)."""
    for frame in inspect.stack()[1:12]:
        obj = frame.frame.f_locals.get("self")
        if isinstance(obj, Trainer):
            return obj
    return None


class ContraiCallback(TrainerCallback):
    """Runs Contrai's lifecycle in a Hugging Face ``Trainer``.

    Args:
        recipe: the recipe file (TOML; ``contrai recipe init`` writes the default). Its phases,
            LR schedule, evaluation and checkpoint cadence govern the run.
        run_dir: the run directory to write.
        holdout_dataset: the holdout, evaluated once at the end.
        classes: classes of the task (default: the model config's ``num_labels``).
        turn_log: under torch.distributed, a file each rank appends every turn it carried out to
            (to check that all ranks applied the same actions).
    """

    def __init__(self, recipe: str | os.PathLike[str], run_dir: str | os.PathLike[str], *,
                 holdout_dataset: Any = None, classes: int | None = None,
                 turn_log: str | os.PathLike[str] | None = None) -> None:
        from ._core import recipe_check

        self.recipe_path = os.fspath(recipe)
        self.recipe_toml = Path(recipe).read_text()
        recipe_check(self.recipe_toml, self.recipe_path)  # a ValueError naming key, line, nearest key
        self.run_dir = Path(run_dir)
        self.holdout = holdout_dataset
        self.classes = classes
        self.turn_log = turn_log
        self.planned = 0  # optimizer steps the recipe plans (set when training starts)
        self.trainer: Trainer | None = None
        self.engine: Engine | None = None
        self._loss = 0.0
        self._loss_seen = False
        self._grad_norm: float | None = None

    # ---- setting up ---------------------------------------------------------------------------

    def on_init_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.trainer = _find_trainer()

    def _check(self, args: Any, state: Any) -> None:
        t = self.trainer
        if t is None:
            raise RuntimeError("ContraiCallback: pass it in Trainer(callbacks=[...]) so that it sees the Trainer")
        if t.eval_dataset is None:
            raise ValueError("ContraiCallback needs an evaluation set: pass eval_dataset= to the Trainer "
                             "(the conductor evaluates at the recipe's cadence, run.eval_every)")
        if getattr(t, "is_fsdp_enabled", False) or _zero3(t):
            refuse_sharded_pruning(self.recipe_toml, self.recipe_path, "FSDP or DeepSpeed ZeRO-3")
        total = self.planned = planned_steps(self.recipe_toml, self.recipe_path)
        if state.max_steps < total:
            raise ValueError(
                f"the recipe plans {total} optimizer steps (main, contract and refine) but the Trainer stops at "
                f"{state.max_steps}: set TrainingArguments(max_steps={total}) — the lifecycle stops the "
                "Trainer itself when it ends")


    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       train_dataloader: Any = None, lr_scheduler: Any = None, **kw: Any) -> Any:
        self._check(args, state)
        trainer = self.trainer
        classes = self.classes or getattr(getattr(model, "config", None), "num_labels", 2)
        job = HfJob(trainer, train_dataloader, self.holdout)
        self.engine = Engine(job, self.run_dir, self.recipe_toml, self.recipe_path, classes, turn_log=self.turn_log)
        self._wrap(trainer)
        self._hold_lr(lr_scheduler)
        self._limit_saves(args)
        resume = self._resume_record(args, state)
        self.engine.start(resume)
        return self._after(control)

    def _limit_saves(self, args: Any) -> None:
        """The Trainer saves at the lifecycle's checkpoints (``resume_from_checkpoint`` needs
        them); without ``save_total_limit`` it would keep every one — a full model and optimizer
        each. It keeps as many as the lifecycle does (said on the log)."""
        if args.save_total_limit is None and args.should_save:
            args.save_total_limit = KEEP_LAST
            print(f"[contrai] TrainingArguments.save_total_limit was unset: the Trainer's checkpoints the lifecycle "
                  f"asks for are kept {KEEP_LAST} at a time (set save_total_limit to keep more)")

    def _wrap(self, trainer: Trainer) -> None:
        """Captures each step's loss (summed over its micro-batches) and pre-clip gradient norm."""
        step = trainer.training_step
        cb = self

        def training_step(*a: Any, **k: Any) -> torch.Tensor:
            loss = step(*a, **k)
            cb._loss += float(loss)
            cb._loss_seen = True
            return loss

        trainer.training_step = training_step  # type: ignore[method-assign]
        clip = getattr(trainer, "_clip_grad_norm", None)
        if clip is not None:
            def clip_grad_norm(*a: Any, **k: Any) -> Any:
                norm = clip(*a, **k)
                cb._grad_norm = float(norm) if norm is not None else None
                return norm

            trainer._clip_grad_norm = clip_grad_norm  # type: ignore[method-assign]

    def _hold_lr(self, scheduler: Any) -> None:
        """The scheduler keeps the LR the conductor set (its own schedule is the recipe's)."""
        if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
            cb = self
            scheduler.lr_lambdas = [
                (lambda _step, base=base: cb._lr() / base if base else 1.0) for base in scheduler.base_lrs
            ]

    def _lr(self) -> float:
        opt = self.trainer.optimizer if self.trainer is not None else None
        return opt.param_groups[0]["lr"] if opt is not None else 0.0

    def _resume_record(self, args: Any, state: Any) -> dict[str, Any] | None:
        if state.global_step == 0:
            return None
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        path = ckpt / "contrai.json"
        if not path.exists():
            raise ValueError(f"{ckpt} holds no contrai.json: it was not written under ContraiCallback, so the "
                             "lifecycle cannot resume from it")
        record = json.loads(path.read_text())
        record["masks_file"] = str(ckpt / "contrai-masks.pt")
        return record

    # ---- every step ---------------------------------------------------------------------------

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
        loss = self._loss if self._loss_seen else None
        loss = self.engine.job.all_reduce([loss])[0] / self.engine.job.world if loss is not None else None
        norm = self._grad_norm
        self._loss, self._loss_seen, self._grad_norm = 0.0, False, None
        self.engine.stepped(loss, norm)
        self._extend(state, control)
        return self._after(control)

    def _extend(self, state: Any, control: Any) -> None:
        """The Trainer's step limit grown by the steps that failed or rollbacks took back, so that
        the plan still fits (its epochs allowing: else ``on_train_end`` says what to set)."""
        need = self.planned + self.engine.lost_steps
        if self.engine.finished is None and state.max_steps < need:
            if control.should_training_stop and state.global_step >= state.max_steps:
                control.should_training_stop = False  # set by the Trainer for the old limit
            state.max_steps = need

    def _after(self, control: Any) -> Any:
        """Carries the engine's state to the Trainer: stop, save, the next step's LR."""
        e = self.engine
        if e.failed is not None:
            raise RuntimeError(f"contrai: the run stopped: {e.failed}")
        if getattr(e, "last_record", None) is not None and e.last_record.get("step") == e.step:
            control.should_save = True
        if e.finished is not None:
            control.should_training_stop = True
        sched = self.trainer.lr_scheduler if self.trainer is not None else None
        if sched is not None and e.plan is not None:
            sched._last_lr = [e.plan["lr"]] * len(sched.optimizer.param_groups)
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        """The lifecycle's record beside the Trainer's checkpoint (``resume_from_checkpoint``)."""
        e = self.engine
        record = getattr(e, "last_record", None)
        if record is None or e.job.rank != 0:
            return
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if ckpt.is_dir():
            e.masks.save(str(ckpt / "contrai-masks.pt"))
            (ckpt / "contrai.json").write_text(json.dumps(record))

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.engine is not None:
            self.engine.stopped_early(state.global_step, self.planned, "TrainingArguments(max_steps={})")


__all__ = ["ContraiCallback"]
