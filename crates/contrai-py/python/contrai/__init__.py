"""Contrai inside PyTorch jobs: the training-contraction lifecycle as one callback.

The Rust core (``contrai._core``) holds the conductor — every rule of the lifecycle —, the live
doctor, the run-directory writer, the data audit and split, and the report. This package carries
the conductor's decisions out in a running PyTorch job:

- :class:`contrai.hf.ContraiCallback` for Hugging Face ``Trainer``;
- :class:`contrai.lightning.ContraiCallback` for Lightning.

Both write a run directory that ``contrai doctor`` and ``contrai report`` read like any Contrai run.
"""

from ._core import RUN_FORMAT, __version__
from .conductor import Conductor, RunInfo
from .data import DroppableDataset, ResumableLoader
from .tools import audit, default_recipe, doctor, job_recipe, recipe_check, report, split

__all__ = [
    "RUN_FORMAT",
    "Conductor",
    "DroppableDataset",
    "ResumableLoader",
    "RunInfo",
    "__version__",
    "audit",
    "default_recipe",
    "job_recipe",
    "doctor",
    "recipe_check",
    "report",
    "split",
]
