"""The engine's checkpoints (written, restored, rejoined, round-tripped), as the Burn engine's ``persist.rs``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from contrai import _core
from contrai.conductor import Conductor
from contrai.engine.adapters import merged
from contrai.engine.checkpoints import Checkpoints, load_weights
from contrai.engine.job import Job
from contrai.engine.masks import Masks
from contrai.engine.model import evaluating, unwrap
from contrai.protocol import CheckpointRecord, State

WRITER = f"contrai-ml {_core.__version__} (pytorch engine)"
# Rollback checkpoints kept besides the best ones (and the Trainer's own, unless it was told).
KEEP_LAST = 3


class Persisting:
    """The :class:`~contrai.engine.Engine`'s checkpoints: written, restored and proved. The
    engine's attributes and methods they use are declared here."""

    job: Job
    run_dir: Path
    leader: bool
    writer: Any
    conductor: Conductor | None
    checkpoints: Checkpoints
    masks: Masks
    step: int
    samples: int
    lost_steps: int
    plan: dict[str, Any] | None
    last_record: Mapping[str, Any] | None
    from_leader: Callable[[Any], Any]
    substitute: Callable[[str, str, dict[str, Any]], None]
    sparsity_row: Callable[[], dict[str, float]]
    split_adapters: Callable[[], None]

    def checkpoint(self, p: dict[str, Any]) -> None:
        """What training changed, the masks and the record with the conductor's ``state`` (rank 0;
        the weights are the same on every rank); the best checkpoints (``keep``) are never removed."""
        record = self.last_record = self.record_of(p["state"])
        if self.leader:
            self.checkpoints.write(self.step, unwrap(self.job.model), self.job.optimizer, self.masks, record,
                                   p["keep"])

    def record_of(self, conductor_state: State) -> CheckpointRecord:
        """What a checkpoint needs besides the tensors: counters, journal lengths, the state
        (``contrai_lifecycle::CheckpointRecord``, read back by ``_core.checkpoint_record``)."""
        lens = self.writer.sync() if self.leader else (0, 0)
        quarantine = self.writer.quarantine_len() if self.leader else 0
        return {"format": _core.RECORD_FORMAT, "step": self.step, "samples": self.samples, "metrics_len": lens[0],
                "decisions_len": lens[1], "quarantine_len": quarantine, "lost_steps": self.lost_steps,
                "merged": merged(unwrap(self.job.model)), "conductor": conductor_state}

    def resume_record(self) -> dict[str, Any] | None:
        """The latest checkpoint's record as a framework saves it between steps: with the LR the
        next step runs at (a resume checks it)."""
        if self.last_record is None:
            return None
        return {**self.last_record, "next_lr": self.plan["lr"] if self.plan is not None else None}

    def restore(self, p: dict[str, Any]) -> dict[str, Any]:
        """Loads a checkpoint's weights, optimizer and masks; with ``Everything`` also its
        counters, and ``metrics.jsonl`` is cut back to it. Rank 0 reads it and sends it to every
        rank (the others may not see its disk). The data order runs on: a running data loader
        cannot be rewound (recorded)."""
        ckpt = self.from_leader(self.checkpoints.read(p["to"]) if self.leader else None)
        record = ckpt.record
        if ckpt.skipped:
            self.substitute("restore the latest checkpoint", f"the checkpoints of steps {ckpt.skipped} do not match "
                            f"their SHA-256 sums: step {ckpt.step}, the newest that does, restored",
                            {"checkpoint_step": ckpt.step, "corrupt": ckpt.skipped})
        model = unwrap(self.job.model)
        if merged(model) and not record.get("merged", False):
            self.split_adapters()
        lost = load_weights(model, ckpt)
        if lost:
            self.substitute("restore the checkpoint's weights", f"{len(lost)} parameters frozen when it was written "
                            "and trained since keep their current values (a checkpoint holds what trains)",
                            {"checkpoint_step": ckpt.step, "parameters": lost[:20]})
        if self.job.optimizer is not None and ckpt.optimizer is not None:
            self.job.optimizer.load_state_dict(ckpt.optimizer)
        had_masks = not self.masks.empty()
        self.masks = ckpt.masks
        history: list[Any] = []
        if p["scope"] == "Everything":
            self.lost_steps += self.step - record["step"]
            self.step, self.samples = record["step"], record["samples"]
            if self.leader:
                self.writer = _core.RunWriter(str(self.run_dir), WRITER, record["metrics_len"],
                                              self.writer.sync()[1])
                history = [json.loads(line) for line in self.writer.history(record["metrics_len"]).split("\n") if line]
                self.checkpoints.drop_after(ckpt.step)
            self.substitute("restore everything at the checkpoint", "weights, optimizer and masks restored; "
                            "the running data loader cannot be rewound, so the retried steps see later batches",
                            {"checkpoint_step": ckpt.step})
        elif had_masks:
            self.sparsity_row()
        return {"Restored": {"state": record["conductor"], "history": history}}

    def rejoin_checkpoints(self, record: dict[str, Any]) -> None:
        """The rollback checkpoints as a job resumed from ``record`` needs them: those after its
        step are another run's future (a job resumed from an older framework checkpoint) and go;
        one of its step, when keep-last removed it, is written from the model and optimizer the
        framework loaded — a rollback must land on this run's past."""
        step = record["step"]
        self.checkpoints.drop_after(step)
        if step in self.checkpoints.steps():
            return
        # The record alone: a framework's keys beside it (each rank's order, the masks' file) go.
        own = _core.checkpoint_record(record, "the resumed checkpoint's record")
        own.pop("next_lr", None)
        # Every checkpoint there stays: which are the best is the conductor's to say, at its next.
        self.checkpoints.write(step, unwrap(self.job.model), self.job.optimizer, self.masks, own,
                               self.checkpoints.steps())

    def round_trip(self, _: Any) -> dict[str, Any]:
        """A checkpoint of the fresh model written and read back into it by the checkpoints' own
        code; its outputs before and after must be identical."""
        model = unwrap(self.job.model)
        # Rank 0 proves the run directory's disk; the others (whose answer is not used) their own.
        root = self.run_dir / "checkpoints" / ".round-trip" if self.leader else Path(tempfile.mkdtemp())
        trip = Checkpoints(root, keep_last=1)
        state = self.from_leader(self.conductor.state() if self.conductor is not None else None)
        trip.write(0, model, self.job.optimizer, self.masks, self.record_of(state), [])
        batch = next(iter(self.job.eval_batches()))
        with evaluating(model), torch.no_grad():
            before = self.job.outputs(model, batch).losses
            load_weights(model, trip.read("Latest"))
            same = torch.equal(before, self.job.outputs(model, batch).losses)
        files = trip.dir(0)
        size = (files / "model.pt").stat().st_size
        opt_bytes = (files / "optimizer.pt").stat().st_size if (files / "optimizer.pt").exists() else 0
        shutil.rmtree(root, ignore_errors=True)
        return {"RoundTripped": {"identical": same, "model_bytes": size, "optimizer_bytes": opt_bytes}}


def resume_masks(record: dict[str, Any]) -> Masks:
    """The masks a resumed run's checkpoint holds (its ``masks.pt`` beside the record)."""
    if "masks_keep" in record:
        m = Masks()
        m.keep = dict(record["masks_keep"])
        return m
    path = record.get("masks_file")
    return Masks.load(path) if path and os.path.exists(path) else Masks()
