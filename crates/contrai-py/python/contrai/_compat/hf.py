"""What ``contrai.hf`` needs of a Hugging Face ``Trainer`` that its public API does not give.

Each function says what it reaches into and why. Tested with the ``transformers`` versions in
``TESTED`` (``scripts/compat/run.sh`` runs the package's tests with the oldest and the newest).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from . import check_version

TESTED = (">=4.47", "<6")


def check() -> bool:
    """Whether the installed transformers is in ``TESTED`` (a warning when not)."""
    return check_version("transformers", TESTED)


def find_trainer_on_stack() -> Trainer | None:
    """The ``Trainer`` whose method is calling us, found by walking the call stack (its frames'
    ``self``): the deprecated way a callback that was never attached finds its Trainer."""
    frame = inspect.currentframe()
    while frame is not None:
        obj = frame.f_locals.get("self")
        if isinstance(obj, Trainer):
            return obj
        frame = frame.f_back
    return None


def register(trainer: Trainer, callback: TrainerCallback) -> None:
    """``callback`` among the Trainer's callbacks, once: ``add_callback`` would add it twice when it
    was already passed in ``callbacks=`` (read from ``trainer.callback_handler.callbacks``)."""
    if not any(c is callback for c in trainer.callback_handler.callbacks):
        trainer.add_callback(callback)


def tap_loss(trainer: Trainer, sink: Callable[[torch.Tensor], None],
             inputs: Callable[[Any], None] = lambda _: None) -> None:
    """Each micro-batch's inputs to ``inputs`` and its loss to ``sink``: ``trainer.training_step``
    (``(model, inputs, ...)``) replaced on the instance by a wrapper (no callback event carries
    the batch or the loss of every micro-batch)."""
    step = trainer.training_step

    def training_step(*a: Any, **k: Any) -> torch.Tensor:
        inputs(a[1] if len(a) > 1 else k.get("inputs"))
        loss = step(*a, **k)
        sink(loss)
        return loss

    trainer.training_step = training_step  # type: ignore[method-assign]


def tap_grad_norm(trainer: Trainer, sink: Callable[[float | None], None]) -> None:
    """Each step's gradient norm before clipping to ``sink``: ``trainer.accelerator.clip_grad_norm_``
    replaced on the instance by a wrapper (the Trainer clips through it and keeps the norm to itself;
    without ``max_grad_norm`` transformers 5 still calls it with an infinite bound, 4.x does not)."""
    accelerator = trainer.accelerator
    clip = accelerator.clip_grad_norm_

    def clip_grad_norm_(*a: Any, **k: Any) -> Any:
        norm = clip(*a, **k)
        sink(float(norm) if norm is not None else None)
        return norm

    accelerator.clip_grad_norm_ = clip_grad_norm_


def epoch_batches(trainer: Trainer, epoch: int) -> Any:
    """The training batches of ``epoch`` as the Trainer's loop draws them: a fresh
    ``get_train_dataloader()`` with ``set_epoch`` on it and on the batch sampler accelerate wraps
    (what ``_inner_training_loop`` does before iterating)."""
    loader = trainer.get_train_dataloader()
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    inner = getattr(getattr(loader, "batch_sampler", None), "batch_sampler", None)
    set_epoch = getattr(inner, "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)
    return loader


def prepare_inputs(trainer: Trainer, batch: Any) -> Any:
    """``batch`` where the Trainer puts its own training batches (its device, DeepSpeed's dtype):
    ``trainer._prepare_inputs``, the Trainer's private step before the model sees a batch."""
    return trainer._prepare_inputs(batch)


def shards_parameters(trainer: Trainer) -> bool:
    """Whether FSDP or DeepSpeed ZeRO-3 splits the parameters across ranks: ``is_fsdp_enabled`` and
    the ``zero_stage`` of Accelerate's DeepSpeed plugin (``trainer.accelerator.state``)."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    state = getattr(getattr(trainer, "accelerator", None), "state", None)
    plugin = getattr(state, "deepspeed_plugin", None)
    return plugin is not None and getattr(plugin, "zero_stage", 0) == 3


def hold_lr(scheduler: Any, lr: Callable[[], float]) -> None:
    """The Trainer's scheduler keeps the LR ``lr()`` gives (the conductor's) instead of its own
    schedule: the ``lr_lambdas`` of the ``LambdaLR`` the Trainer builds, replaced (other schedulers
    are left; the LR is set before every step either way)."""
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        scheduler.lr_lambdas = [_factor(float(base), lr) for base in scheduler.base_lrs]


def _factor(base: float, lr: Callable[[], float]) -> Callable[[int], float]:
    """A ``LambdaLR`` factor that turns the group's base LR into ``lr()``."""
    return lambda _step: lr() / base if base else 1.0


def show_lr(scheduler: Any, lr: float) -> None:
    """The LR the Trainer logs for the next step (it reads ``get_last_lr()``): the scheduler's
    ``_last_lr``, set to ``lr`` in every parameter group."""
    if scheduler is not None:
        scheduler._last_lr = [lr] * len(scheduler.optimizer.param_groups)


def extend_max_steps(state: TrainerState, control: TrainerControl, need: int) -> None:
    """The Trainer's step limit raised to ``need`` while it trains: ``state.max_steps``, which its
    loop and its stop rule read at every step, and the stop it already set for the old limit."""
    if state.max_steps >= need:
        return
    if control.should_training_stop and state.global_step >= state.max_steps:
        control.should_training_stop = False
    state.max_steps = need


def checkpoint_dir(args: TrainingArguments, step: int) -> Path:
    """The directory the Trainer saves step ``step`` in: ``checkpoint-<step>`` (its
    ``PREFIX_CHECKPOINT_DIR``) under ``output_dir``."""
    if args.output_dir is None:
        raise ValueError("TrainingArguments.output_dir is unset: the Trainer's checkpoints have nowhere to go")
    return Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{step}"
