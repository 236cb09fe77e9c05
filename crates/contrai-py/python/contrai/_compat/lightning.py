"""What ``contrai.lightning`` needs of a Lightning ``Trainer`` that its public API does not give.

Each function says what it reaches into and why. Tested with the ``lightning`` versions in
``TESTED`` (``scripts/compat/run.sh`` runs the package's tests with the oldest and the newest).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

from . import check_version

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
