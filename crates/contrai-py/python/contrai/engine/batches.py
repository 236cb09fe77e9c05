"""What an optimizer step's micro-batches tell spike triage: the training rows they held (a data
cause shows as the same rows spiking again) and their mean length in tokens (a loss that follows
length, as under ``group_by_length``, is benign)."""

from __future__ import annotations

from typing import Any, Callable

import torch

from contrai.data import DroppableDataset
from contrai.resume import gathered


def batch_size(inputs: Any) -> int | None:
    """Samples in a collated batch: the first dimension of its ``labels`` or ``input_ids`` (a
    dict), of its first tensor (a tuple or list), or of the tensor itself."""
    if isinstance(inputs, dict):
        first = inputs.get("labels", inputs.get("input_ids"))
    elif isinstance(inputs, (list, tuple)) and inputs:
        first = inputs[0]
    else:
        first = inputs
    return int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() > 0 else None


def batch_tokens(inputs: Any) -> int | None:
    """Tokens a collated text batch holds (its ``attention_mask`` summed); ``None`` for other batches."""
    mask = inputs.get("attention_mask") if isinstance(inputs, dict) else None
    return int(mask.sum()) if isinstance(mask, torch.Tensor) else None


def token_rows(inputs: Any) -> list[list[int]] | None:
    """Each row's token ids in a collated text batch (its ``input_ids``, where its
    ``attention_mask`` is set); ``None`` for other batches."""
    ids = inputs.get("input_ids") if isinstance(inputs, dict) else None
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return None
    mask = inputs.get("attention_mask")
    keep = mask.bool() if isinstance(mask, torch.Tensor) and mask.shape == ids.shape else torch.ones_like(ids, dtype=torch.bool)
    return [row[k].tolist() for row, k in zip(ids, keep)]


def watch(dataset: Any) -> None:
    """The rows ``dataset`` serves noted from here on, afresh — at the start of training and of
    every epoch, where a loader starts drawing anew, so that a fetch no step trained cannot shift
    the rows of later steps — when it can say them (a :class:`DroppableDataset`)."""
    if isinstance(dataset, DroppableDataset):
        dataset.watch()


def unwatch(dataset: Any) -> None:
    """No more rows noted (the training loop is over)."""
    if isinstance(dataset, DroppableDataset):
        dataset.unwatch()


class StepBatches:
    """The rows and tokens of the micro-batches of the optimizer step under way, on this rank."""

    def __init__(self) -> None:
        # None once a micro-batch's rows were not known (a dataset that is no DroppableDataset, a
        # loader whose workers fetch in other processes).
        self.rows: list[int] | None = []
        self.tokens: int | None = 0
        self.samples = 0

    def add(self, dataset: Any, inputs: Any) -> None:
        """A micro-batch of ``dataset`` about to be trained: its rows (the ones the dataset served
        last, in order) and tokens."""
        n = batch_size(inputs)
        rows = dataset.take(n) if isinstance(dataset, DroppableDataset) and n is not None else None
        self.rows = None if rows is None or self.rows is None else self.rows + rows
        tokens = batch_tokens(inputs)
        self.tokens = None if tokens is None or self.tokens is None else self.tokens + tokens
        self.samples += n or 0

    def take(self, world: int, all_reduce: Callable[[list[float]], list[float]]) -> tuple[list[int], float | None]:
        """The step's rows over every rank (empty when any rank could not tell them) and its mean
        tokens a sample; cleared for the next step. Every rank must call it."""
        per_rank = gathered(self.rows, world)
        rows = [] if any(r is None for r in per_rank) else sorted({r for rs in per_rank for r in rs})
        known = 0.0 if self.tokens is None else 1.0
        tokens, samples, all_known = all_reduce([float(self.tokens or 0), float(self.samples), known])
        self.rows, self.tokens, self.samples = [], 0, 0
        length = tokens / samples if all_known == world and samples > 0 else None
        return rows, length
