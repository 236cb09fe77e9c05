"""Contrai inside PyTorch jobs: the training-contraction lifecycle as one callback.

The Rust core (``contrai._core``) holds the conductor — every rule of the lifecycle —, the live
doctor, the run-directory writer, the data audit and split, and the report. This package carries
the conductor's decisions out in a running PyTorch job:

- :class:`contrai.integrations.hf.ContraiCallback` for Hugging Face ``Trainer``;
- :class:`contrai.integrations.lightning.ContraiCallback` for Lightning.

Both write a run directory that ``contrai doctor`` and ``contrai report`` read like any Contrai run.
The doctor, the data stage, the recipe and the report need no torch; the engines and
:class:`ResumableLoader` do (``pip install "contrai-ml[hf]"`` or ``[lightning]``).
"""

from typing import TYPE_CHECKING, Any

from contrai._bin import ContraiBinNotFound, find_contrai_bin
from contrai._core import RUN_FORMAT, __version__
from contrai.conductor import Conductor, RunInfo
from contrai.data import DroppableDataset
from contrai.tools import audit, default_recipe, doctor, job_recipe, recipe_check, report, split

__all__ = [
    "RUN_FORMAT",
    "Conductor",
    "ContraiBinNotFound",
    "DroppableDataset",
    "ResumableLoader",
    "RunInfo",
    "__version__",
    "audit",
    "default_recipe",
    "job_recipe",
    "doctor",
    "find_contrai_bin",
    "recipe_check",
    "report",
    "split",
]


if TYPE_CHECKING:
    from contrai.loader import ResumableLoader


def __getattr__(name: str) -> Any:
    """``ResumableLoader`` is imported when first asked for: it needs torch, ``import contrai`` does not."""
    if name == "ResumableLoader":
        from contrai.loader import ResumableLoader

        return ResumableLoader
    raise AttributeError(f"module 'contrai' has no attribute {name!r}")
