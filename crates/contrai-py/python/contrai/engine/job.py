"""What a framework job gives the engine (``Job``, ``Outputs``) and the checks both callbacks make on it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch
import torch.nn.functional as F

from contrai import _core
from contrai.conductor import Conductor, RunInfo
from contrai.data import DroppableDataset
from contrai.engine.model import first_device
from contrai.integrations.trackers import Sink


@dataclass
class Outputs:
    """A batch through the model: the loss of each sample, and (when classification or
    token-level labels exist) the number of correct predictions and of predictions."""

    losses: torch.Tensor
    correct: int
    counted: int


class Job:
    """What the engine needs of a running job; the framework adapters fill it in."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    rank: int = 0
    world: int = 1

    def logits(self, model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's logits on a batch (``[B, C]``, or ``[B, T, V]`` for a token model) and
        the batch's labels (no dropout here: the caller sets eval mode)."""
        raise NotImplementedError

    def outputs(self, model: torch.nn.Module, batch: Any) -> Outputs:
        """The model's per-sample losses and correct predictions on a batch."""
        return per_sample(*self.logits(model, batch))

    def train_batch(self) -> Any:
        """One training batch (validate's check overfits it)."""
        raise NotImplementedError

    def eval_batches(self) -> Iterable[Any]:
        """The validation partition, in batches (this rank's shard under DDP)."""
        raise NotImplementedError

    def train_rows(self) -> Iterator[tuple[list[int], Any]]:
        """The whole train partition in row order, in batches, with each batch's rows."""
        raise NotImplementedError

    def holdout_batches(self) -> Iterable[Any] | None:
        """The holdout, in batches, when the user gave one."""
        return None

    def train_dataset(self) -> Any:
        """The train dataset (a :class:`DroppableDataset` lets noisy samples be dropped)."""
        return None

    def tokenizer(self) -> Any:
        """The job's tokenizer, written beside an exported model when the framework holds one."""
        return None

    def schedulers(self) -> list[Any]:
        """The LR schedulers stepping the optimizer (told when its parameter groups change)."""
        return []

    def trackers(self) -> list[Sink]:
        """The tracker runs the job logs to (W&B, MLflow, ...), which get the decisions too."""
        return []

    def logged_step(self) -> int:
        """The step the job's own logs are at now: the trackers' x-axis."""
        return 0

    def barrier(self) -> None:
        """Waits for every rank (nothing on one process)."""
        if distributed(self.world):
            torch.distributed.barrier()

    def all_reduce(self, values: list[float]) -> list[float]:
        """Sums of ``values`` over all ranks (identity on one process)."""
        if not distributed(self.world):
            return values
        t = torch.tensor(values, dtype=torch.float64, device=first_device(self.model))
        torch.distributed.all_reduce(t)
        return t.tolist()


class OriginalRows(torch.utils.data.Dataset[Any]):
    """The train dataset as it was given, whatever was dropped: per-sample losses are measured on
    every row (a :class:`DroppableDataset` serves a dropped row as another)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:
        return self.dataset.original(i) if isinstance(self.dataset, DroppableDataset) else self.dataset[i]


def distributed(world: int) -> bool:
    """Whether this process is one of several ranks of a ``torch.distributed`` job."""
    return world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized()


def refuse_sharded_pruning(recipe_toml: str, recipe_path: str, sharding: str) -> None:
    """Raises when the recipe prunes weights (a contract phase with ``contract.prune`` entries)
    and ``sharding`` splits parameters across ranks: pruning needs them whole, and masks applied
    to shards would be wrong silently."""
    r = json.loads(_core.recipe_json(recipe_toml, recipe_path))
    if r["contract"]["prune"] and "contract" in r["run"]["phases"]:
        raise ValueError(
            f"the recipe prunes weights (contract.prune), and pruning needs whole parameters: {sharding} "
            "shards them. Run with DDP or DeepSpeed ZeRO-1/2, or set contract.prune = [] (every other "
            "decision works under sharding)")


def job_steps(recipe_toml: str, limit: int | None) -> int | None:
    """The job's own optimizer-step budget (its ``max_steps``, or epochs × batches) when the recipe
    leaves ``main.steps`` to it: the plan is then laid on it (the phases keep their shares);
    ``None`` when the recipe writes ``main.steps`` (absolute steps win) or the job has no limit."""
    if limit is None or limit <= 0 or _core.recipe_gives(recipe_toml, "main.steps"):
        return None
    return limit


def planned_steps(recipe_toml: str, recipe_path: str, job: int | None = None) -> int:
    """Optimizer steps the recipe plans (main, contract and refine) — on the job's budget ``job``
    when the recipe leaves it the steps: the framework's step limit must reach it."""
    info = RunInfo(train_samples=1, classes=2, job_steps=job)
    s = Conductor(recipe_toml, info, recipe_path).phase_steps()
    return s["main"] + s["contract"] + s["refine"]


def per_sample(logits: torch.Tensor, labels: torch.Tensor) -> Outputs:
    """Per-sample cross-entropy and correct predictions of a classifier (``[B, C]`` logits) or a
    token model (``[B, T, V]`` logits, labels shifted by one as causal LMs do, -100 ignored)."""
    if logits.dim() == 2:
        losses = F.cross_entropy(logits.float(), labels, reduction="none")
        correct = int((logits.argmax(-1) == labels).sum())
        return Outputs(losses, correct, labels.numel())
    logits, labels = logits[:, :-1].float(), labels[:, 1:]
    mask = labels != -100
    tok = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1).clamp_min(0), reduction="none")
    tok = tok.view(labels.shape) * mask
    losses = tok.sum(1) / mask.sum(1).clamp_min(1)
    correct = int(((logits.argmax(-1) == labels) & mask).sum())
    return Outputs(losses, correct, int(mask.sum()))
