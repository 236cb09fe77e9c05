"""The PyTorch engine's checkpoints under ``<run>/checkpoints/step-NNNNNNNN``: what a rollback
restores (the conductor says when and which).

A checkpoint holds what training can change, not the whole model: the trainable parameters, the
buffers, the optimizer state, the pruning masks and the record (counters, journal lengths, the
conductor's state). Frozen parameters are left out — a LoRA job's base is written once by the
framework that loaded it, not at every checkpoint. A frozen parameter changes in
two ways — pruning, and a LoRA job's merge (``contrai.engine.adapters``), after which the merged and the
pruned matrices train —: before a frozen matrix first changes, its values are kept once in
``originals/``, and a restore to a checkpoint that left it out rebuilds it as those values under
the checkpoint's mask.

The envelope is the run format's (``contrai_run::envelope`` through ``_core.Checkpoints``, the
one the Burn engine writes): files go to a temporary directory, each forced to disk, are sealed by
a ``SHA256SUMS`` and renamed into place, so a crash never leaves half a checkpoint; a checkpoint
whose files do not match is never loaded (a rollback to the latest takes the newest that does).
This module writes only the PyTorch engine's own files into it; ``state.json`` is the typed
record (``contrai.protocol.CheckpointRecord``, format 4), read back through
``_core.checkpoint_record``, which refuses a damaged one naming its field; formats 2 (sums inside
``state.json``) and 3 still read.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from contrai import _core
from contrai._core import CorruptCheckpoint as CorruptCheckpoint
from contrai.engine.adapters import plain
from contrai.engine.masks import Masks
from contrai.protocol import CheckpointRecord


@dataclass
class Checkpoint:
    """A checkpoint read back, on the CPU."""

    step: int
    record: CheckpointRecord
    # Model state to load (``strict=False``): what the checkpoint holds, and the frozen pruned
    # matrices rebuilt from their originals.
    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None
    masks: Masks
    # Newer checkpoints passed over: their files did not match their sums.
    skipped: list[int]


def synced(path: Path) -> None:
    """Forces a file to disk (before it is renamed into place)."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def frozen(model: torch.nn.Module) -> set[str]:
    """Names of the parameters training does not change (``requires_grad`` off)."""
    return {n for n, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}


@contextmanager
def put_back(params: list[torch.Tensor]) -> Iterator[None]:
    """The tensors' values and gradients now, put back on exit: a measurement made in place,
    instead of on a copy of the whole model (which a large model's accelerator has no room for)."""
    saved = [(p.detach().to("cpu", copy=True), p.grad) for p in params]
    try:
        yield
    finally:
        with torch.no_grad():
            for p, (value, grad) in zip(params, saved):
                p.copy_(value.to(p.device))
                p.grad = grad


class Checkpoints:
    """The checkpoint directories of one run (rank 0 writes and reads them)."""

    def __init__(self, root: Path, keep_last: int) -> None:
        self.root = root
        self.keep_last = keep_last
        self.envelope = _core.Checkpoints(str(root))

    def dir(self, step: int) -> Path:
        return self.envelope.dir(step)

    def steps(self) -> list[int]:
        return self.envelope.steps()

    def write(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, masks: Masks,
              record: CheckpointRecord, keep: list[int]) -> None:
        """Checkpoint ``step`` in the run's envelope; the oldest beyond ``keep_last`` removed,
        except the steps in ``keep`` (the best ones)."""
        pending = self.envelope.begin(step)
        tmp = pending.path()
        skip = frozen(model)
        torch.save({k: v for k, v in model.state_dict().items() if k not in skip}, tmp / "model.pt")
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        masks.save(str(tmp / "masks.pt"))
        pending.add("state.json", json.dumps({**record, "frozen": sorted(skip)}).encode())
        pending.commit()
        self.envelope.keep_last(self.keep_last, keep)

    def read(self, to: Any) -> Checkpoint:
        """Checkpoint ``to``: ``{"Step": n}``; ``"Latest"``, the newest whose files match their
        sums; ``{"Before": n}``, the newest such of a step below ``n`` (the newest there is when
        none is below)."""
        if isinstance(to, dict) and "Step" in to:
            return self.load(to["Step"], self.envelope.verify(to["Step"]), [])
        found, skipped = self.envelope.latest(None if to == "Latest" else to["Before"])
        if found is None:
            raise RuntimeError(f"{self.root}: no checkpoint to roll back to"
                               + (f" (steps {skipped} do not match their sums)" if skipped else ""))
        step, state = found
        return self.load(step, state, skipped)

    def load(self, step: int, state: str, skipped: list[int]) -> Checkpoint:
        """A verified checkpoint's files, on the CPU; frozen pruned matrices rebuilt from their
        originals under its masks."""
        d = self.dir(step)
        record = _core.checkpoint_record(json.loads(state), str(d / "state.json"))
        # weights_only: a run directory is data; a crafted pickle in it must not run code on
        # resume or rollback (its SHA-256 sums sit beside it and protect nothing against that).
        weights = torch.load(d / "model.pt", map_location="cpu", weights_only=True)
        optimizer = (
            torch.load(d / "optimizer.pt", map_location="cpu", weights_only=True)
            if (d / "optimizer.pt").exists()
            else None
        )
        masks = Masks.load(str(d / "masks.pt")) if (d / "masks.pt").exists() else Masks()
        for name in set(record.get("frozen", [])) & self.originals():
            original = torch.load(self.original_file(name), map_location="cpu", weights_only=True)
            keep = masks.keep.get(plain(name))
            weights[name] = original if keep is None else original * keep.to(original.dtype)
        return Checkpoint(step, record, weights, optimizer, masks, skipped)

    def drop_after(self, step: int) -> None:
        """The checkpoints after ``step`` (a rollback to it made them the past of another run)."""
        self.envelope.discard_after(step)

    # ---- frozen matrices that pruning changes ---------------------------------------------------

    def original_file(self, name: str) -> Path:
        return self.root / "originals" / f"{name}.pt"

    def originals(self) -> set[str]:
        """The frozen matrices whose values before pruning are kept."""
        return {p.name[:-3] for p in (self.root / "originals").glob("*.pt")}

    def keep_originals(self, model: torch.nn.Module, names: Iterable[str]) -> None:
        """Before the matrices ``names`` (as :func:`masks.matrices` names them) first change —
        masks applied, adapters merged in, made trainable —: the values of each one still frozen,
        once, under its parameter's name (a restore to a checkpoint from before needs them back)."""
        have = self.originals()
        wanted = set(names)
        todo = [(n, p) for n, p in model.named_parameters()
                if not p.requires_grad and plain(n) in wanted and n not in have]
        if not todo:
            return
        (self.root / "originals").mkdir(parents=True, exist_ok=True)
        for name, p in todo:
            tmp = self.root / "originals" / f".tmp-{name}"
            torch.save(p.detach().cpu(), tmp)
            synced(tmp)
            tmp.rename(self.original_file(name))


def newest_verified(found: list[tuple[int, Path]]) -> Path | None:
    """The newest of a framework's sealed checkpoints (``(step, directory)``) whose files match their
    sums; one that does not (a kill mid-save) is passed over, said on the log."""
    for _, path in sorted(found, reverse=True):
        try:
            _core.verify(path)
        except (_core.CorruptCheckpoint, OSError) as err:
            print(f"[contrai] {path} passed over: {err}")
            continue
        return path
    return None


def load_weights(model: torch.nn.Module, ckpt: Checkpoint) -> list[str]:
    """Loads a checkpoint's weights into ``model``; the names it could not restore: parameters
    frozen when it was written and trained since (their values then were not kept)."""
    missing, unexpected = model.load_state_dict(ckpt.weights, strict=False)
    omitted = set(ckpt.record.get("frozen", []))
    if unexpected or set(missing) - omitted:
        raise RuntimeError(f"checkpoint of step {ckpt.step} does not fit the model: "
                           f"unexpected {sorted(unexpected)[:5]}, missing {sorted(set(missing) - omitted)[:5]}")
    return sorted(set(missing) - frozen(model))
