"""What a checkpoint carries so that a resumed job continues exactly where it stopped, beyond the
weights, optimizer and the lifecycle's record — and the checks a resume makes before and at its
first step.

==============================  ===============================================================
carried                         checked on resume
==============================  ===============================================================
the sample order: each rank's   before the first step, the epoch's batches up to the checkpoint
epoch, the micro-batches it     drawn again from the resumed job's own loader and hashed: the same
trained in it and a hash of     hash, or the resume stops saying the order changed (the seed, the
them in order                   sampler, the dataset; not checked when the lifecycle dropped rows
                                in that epoch); at the first step, the batch trained must be the
                                next one of that order, or it stops saying the skip landed
                                elsewhere
the RNG states of every rank    at the first step, mid-epoch: the generators the framework put
(torch CPU and CUDA, NumPy,     back must be the checkpoint's; when not (a checkpoint without its
Python)                         RNG file, a framework that keeps none) they are put back (said)
the LR of the next step         the conductor's plan for that step must give it (else the recipe
                                changed under the run: the resume stops and says both)
==============================  ===============================================================
"""

from __future__ import annotations

import base64
import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch

try:
    import numpy as np
except ImportError:  # NumPy is optional to torch; its generator is then nobody's to keep
    np = None  # type: ignore[assignment]


def rng_states() -> dict[str, Any]:
    """This process's random number generators, in plain values (JSON, and the ``weights_only``
    unpickling a framework's checkpoint loader may use, both keep them)."""
    py = random.getstate()
    states: dict[str, Any] = {"python": [py[0], list(py[1]), py[2]],
                              "torch": text_of(torch.random.get_rng_state())}
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        states["numpy"] = [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states["cuda"] = [text_of(s) for s in torch.cuda.get_rng_state_all()]
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Puts back what :func:`rng_states` took."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.random.set_rng_state(bytes_tensor(states["torch"]))
    if np is not None and "numpy" in states:
        name, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([bytes_tensor(s) for s in states["cuda"]])


def text_of(state: torch.Tensor) -> str:
    """A generator's state (a byte tensor) as text, for a checkpoint in plain values."""
    return base64.b64encode(state.numpy().tobytes()).decode()


def bytes_tensor(text: str) -> torch.Tensor:
    """The byte tensor :func:`text_of` wrote."""
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def gathered(obj: Any, world: int) -> list[Any]:
    """``obj`` of every rank, in rank order (``[obj]`` on one process). Every rank must call it."""
    if world <= 1 or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [obj]
    out: list[Any] = [None] * world
    torch.distributed.all_gather_object(out, obj)
    return out


def check_lr(recorded: float | None, planned: float | None) -> str | None:
    """What differs between the LR a checkpoint recorded for its next step and the one the resumed
    plan gives (``None`` when they agree, or either is unknown)."""
    if recorded is None or planned is None or abs(recorded - planned) <= 1e-12 * max(abs(recorded), 1e-30):
        return None
    return (f"the checkpoint recorded LR {recorded:.6g} for its next step, the resumed schedule gives {planned:.6g}: "
            "the recipe changed under the run (resume with the recipe it started with, or start a new run)")


def fingerprint(batch: Any) -> str:
    """A hash of a batch's tensors (by key, in order): the sample order seen by the model."""
    digest = hashlib.sha256()

    def add(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            digest.update(x.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
                          if x.dtype != torch.bool else x.detach().cpu().numpy().tobytes())
        elif isinstance(x, dict):
            for k in sorted(x):
                digest.update(str(k).encode())
                add(x[k])
        elif isinstance(x, (list, tuple)):
            for v in x:
                add(v)

    add(batch)
    return digest.hexdigest()[:32]


@dataclass
class Order:
    """The micro-batches one rank trained in the epoch under way, as a chained hash."""

    epoch: int = 0
    count: int = 0
    chain: str = ""
    # The training set lost rows during the epoch: its batches from there on are not what a
    # loader drawing it again gives for them, so only the batch after the checkpoint is checked.
    changed: bool = False

    def start(self, epoch: int) -> None:
        self.epoch, self.count, self.chain, self.changed = epoch, 0, "", False

    def add(self, fp: str) -> None:
        self.chain = hashlib.sha256((self.chain + fp).encode()).hexdigest()[:32]
        self.count += 1

    def record(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "count": self.count, "chain": self.chain, "changed": self.changed}


def replayed(batches: Iterable[Any], record: dict[str, Any]) -> tuple[str | None, str | None]:
    """The epoch's first ``record["count"]`` batches of ``batches`` hashed as :class:`Order` does:
    what differs from ``record`` (``None`` when the same) and the fingerprint of the batch after
    them (the one the resumed job must train first; ``None`` at the epoch's end). The generators
    are left as they were."""
    order = Order(record["epoch"])
    with torch.random.fork_rng(devices=[]):
        it = iter(batches)
        for b in it:
            if order.count == record["count"]:
                nxt: str | None = fingerprint(b)
                break
            order.add(fingerprint(b))
        else:
            nxt = None
    if order.count < record["count"]:
        return (f"the resumed job's loader gives {order.count} batches in epoch {record['epoch']}, the stopped job "
                f"had trained {record['count']} of it", nxt)
    if order.chain != record["chain"] and not record.get("changed", False):
        return (f"the resumed job's loader orders epoch {record['epoch']} differently: its first {record['count']} "
                "batches are not the ones the stopped job trained (the data seed, the sampler or the dataset "
                "changed)", nxt)
    return None, nxt


@dataclass
class Resumed:
    """What a resumed job checks at its first step (this rank's part of the checkpoint)."""

    rng: dict[str, Any] | None = None
    next_batch: str | None = None
    checked_rng: bool = False
    checked_batch: bool = False
    notes: list[str] = field(default_factory=list)

    def at_first_step(self) -> None:
        """The generators put back when the framework did not (said once)."""
        if self.checked_rng or self.rng is None:
            return
        self.checked_rng = True
        if rng_states() != self.rng:
            set_rng_states(self.rng)
            self.notes.append("the random generators at the first resumed step were not the checkpoint's "
                              "(a checkpoint without its RNG file?): put back")

    def first_batch(self, fp: str) -> str | None:
        """What differs between the first batch trained after the resume and the one due."""
        if self.checked_batch:
            return None
        self.checked_batch = True
        if self.next_batch is None or fp == self.next_batch:
            return None
        return ("the first batch the resumed job trained is not the next one of the stopped job's order (the "
                "framework skipped to another position: ignore_data_skip, or a changed batch size?)")
