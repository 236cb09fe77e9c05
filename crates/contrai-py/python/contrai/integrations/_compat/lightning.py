"""What ``contrai.integrations.lightning`` needs of a Lightning ``Trainer`` that its public API does not give.

Each function says what it reaches into and why. Tested with the ``lightning`` versions in
``TESTED`` (``scripts/compat/run.sh`` runs the package's tests with the oldest and the newest).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

from contrai.integrations._compat import check_version

TESTED = (">=2.4", "<3")


def check() -> bool:
    """Whether the installed lightning is in ``TESTED`` (a warning when not)."""
    return check_version("lightning", TESTED)


def shards_parameters(strategy: Any) -> bool:
    """Whether the strategy splits parameters across ranks: FSDP, model parallel, and DeepSpeed's
    ``zero_stage_3`` (read off the strategy: DeepSpeed is an optional install)."""
    return isinstance(strategy, (FSDPStrategy, ModelParallelStrategy)) or bool(getattr(strategy, "zero_stage_3", False))


def epoch_steps(trainer: pl.Trainer) -> int | None:
    """Optimizer steps of a Trainer bounded by epochs (``max_steps=-1``): ``estimated_stepping_batches``
    (Lightning's own count: epochs × batches ÷ accumulation); ``None`` when unbounded."""
    steps = trainer.estimated_stepping_batches
    return int(steps) if steps != float("inf") else None


def extend_max_steps(trainer: pl.Trainer, need: int) -> None:
    """The Trainer's step limit raised to ``need`` while it fits: ``trainer.max_steps`` has no
    setter, so the limit the training-epoch loop checks (``fit_loop.epoch_loop.max_steps``) is set."""
    if trainer.max_steps != -1 and trainer.max_steps < need:
        trainer.fit_loop.epoch_loop.max_steps = need


# What ``contrai.preflight`` reads of a job before its first step.


def checkpoint_every(callback: Any) -> tuple[int, int, bool]:
    """A ``ModelCheckpoint``'s cadence: its ``every_n_train_steps`` (0: unset), ``every_n_epochs``
    and whether it saves on a timer (``train_time_interval``), which it keeps only in private
    attributes (``_every_n_train_steps``, ``_every_n_epochs``, ``_train_time_interval``)."""
    steps = int(getattr(callback, "_every_n_train_steps", 0) or 0)
    epochs = int(getattr(callback, "_every_n_epochs", 0) or 0)
    return steps, epochs, getattr(callback, "_train_time_interval", None) is not None


def val_source(trainer: pl.Trainer) -> bool | None:
    """Whether the fit being run has validation data: the source of its validation loop
    (``fit_loop.epoch_loop.val_loop._data_source``: the loaders given to ``fit``, the datamodule or
    the module) holds one; ``None`` before ``fit`` attached its data."""
    loop = getattr(getattr(trainer.fit_loop, "epoch_loop", None), "val_loop", None)
    source = getattr(loop, "_data_source", None)
    if source is None or getattr(source, "instance", None) is None:
        return None
    return bool(source.is_defined())
