"""The PyTorch engine: it carries out the conductor's decisions on a ``torch.nn.Module`` inside a
running job (Hugging Face ``Trainer`` or Lightning) and reports what happened.

It holds no lifecycle rule: when to evaluate, checkpoint, prune, roll back or move on is the
conductor's (in the Rust core). How to do it on a PyTorch model is here. What the engine cannot
do as asked it records as an ``engine_substitute`` decision — never silently.

The framework adapters (``contrai.integrations.hf``, ``contrai.integrations.lightning``) give it a :class:`Job`
(``contrai.engine.job``): the model, the optimizer, the data and the model's outputs on a batch.

This module holds the engine's construction, its turn loop and the actions it carries out; its
other parts are mixins laid out as the Burn engine's files are: ``measure`` (evaluations and
measurements), ``persist`` (checkpoints), ``finale`` (the end of a run) and ``lora`` (a LoRA
job's adapters). What was importable from here still is.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from contrai import _core
from contrai.conductor import Conductor, RunInfo, kind
from contrai.data import DroppableDataset
from contrai.engine.checkpoints import Checkpoints
from contrai.engine.finale import Finishing
from contrai.engine.job import (Job, OriginalRows, Outputs, distributed, job_steps, per_sample, planned_steps,
                                refuse_sharded_pruning)
from contrai.engine.lora import MERGED, Merging, fit_schedulers, train_also, trained_past_merge
from contrai.engine.masks import Masks, head_count, matrices
from contrai.engine.measure import CALIBRATION, Measuring, single_samples, spread_batches
from contrai.engine.model import dropout_sites, recompute, recomputes, set_dropout, task, tuning, unwrap
from contrai.engine.persist import KEEP_LAST, WRITER, Persisting, resume_masks
from contrai.integrations.trackers import Trackers
from contrai.protocol import Turn
from contrai.quant.variants import Variants
from contrai.resume import check_lr
from contrai.rows import words_json

# The engine, and what its parts hold that callers import from here.
__all__ = ["CALIBRATION", "HELD", "KEEP_LAST", "MERGED", "WRITER", "Engine", "Hook", "Job", "OriginalRows",
           "Outputs", "distributed", "fit_schedulers", "hold", "job_steps", "per_sample", "planned_steps",
           "refuse_sharded_pruning", "resume_masks", "single_samples", "spread_batches", "train_also",
           "trained_past_merge"]


class Engine(Persisting, Measuring, Finishing, Merging):
    """Carries out a conductor's turns on a PyTorch job and writes the run directory.

    Under ``torch.distributed`` rank 0 alone consults the conductor and writes the run directory;
    each turn is broadcast to every rank before any acts, so all apply the same actions at the
    same step. ``turn_log``: a file (suffixed ``.rank<N>``) each rank appends every turn it
    carried out to, to check exactly that.

    Three tables name what the engine does with a turn: ``actions`` (an action's name to the
    method carrying it out), ``requests`` (a request's name to the method answering it with the
    observation it asks for) and ``ends`` (``Train``, ``Finish`` and ``Fail``, which end a run of
    turns). A name in none of them is an error naming the ones known."""

    def __init__(self, job: Job, run_dir: str | os.PathLike[str], recipe_toml: str, recipe_path: str,
                 classes: int, keep_last: int = KEEP_LAST, turn_log: str | os.PathLike[str] | None = None,
                 job_steps: int | None = None) -> None:
        self.job = job
        # The job's own step budget the plan is laid on (None: the recipe's steps).
        self.job_steps = job_steps
        self.run_dir = Path(run_dir)
        self.recipe_toml = recipe_toml
        self.recipe_path = recipe_path
        self.classes = classes
        self.checkpoints = Checkpoints(self.run_dir / "checkpoints", keep_last)
        self.leader = job.rank == 0
        self.writer: Any = None
        self.conductor: Conductor | None = None
        self.masks = Masks()
        self.step = 0
        self.samples = 0
        self.phase = "main"
        self.batch = 0
        self.dropout_scale = 1.0
        self.base_dropout: dict[str, float] = {}
        self.plan: dict[str, Any] | None = None
        self.recomputing: bool | None = None
        self.finished: dict[str, Any] | None = None
        self.failed: str | None = None
        self.started = time.time()
        self.final_val = (math.nan, math.nan)
        self.substitutes: list[tuple[str, str]] = []
        # The structures the masks took whole ("heads", "units").
        self.whole: set[str] = set()
        # Times the training set lost rows (a running epoch's batches change from there on).
        self.drops = 0
        self.batches_noted: set[tuple[str, int]] = set()
        # The framework's optimizer steps that did not advance the plan (failed steps, and those
        # rollbacks took back): its step limit must grow by them.
        self.lost_steps = 0
        self.turn_log = None if turn_log is None else open(f"{os.fspath(turn_log)}.rank{job.rank}", "a")
        # The record of the latest checkpoint (the framework saves its own beside it).
        # The latest checkpoint's record (on ranks other than 0, only its step).
        self.last_record: Mapping[str, Any] | None = None
        # The model exported, quantized and served (a LoRA job's without its PEFT layers), once exported.
        self.final: torch.nn.Module | None = None
        # The exported model's parameters and share of zero weights (pruned units cut out) and how
        # it was made, for the model card.
        self.exported = (0, 0.0)
        self.export_note = ""
        # Each pruned module's share of zeros when exported (the cut then changes what masks cover).
        self.pruned: dict[str, float] | None = None
        # Refine's quantized variants of the served model.
        self.variants = Variants(self.run_dir, self.calibrate, CALIBRATION, self.summed)
        # The run directory's one-writer lock (rank 0), held from start to the job's end.
        self.lock: _core.RunLock | None = None
        # The signal the job stopped on (a preemption), when it did.
        self.stopped_by: int | None = None
        self.holdout_eval: tuple[float, float, int] = (math.nan, math.nan, 0)
        # The model card written at the holdout read, for the trackers' summary.
        self.card: dict[str, Any] | None = None
        # The job's trackers, which get the phase, the decisions and the final figures (rank 0).
        # (Looked up on the job at the first write: a job is asked only for what the run uses.)
        self.trackers = Trackers(lambda: job.trackers(), lambda: job.logged_step())
        # What each action the conductor orders does; what answers each request with the
        # observation it asks for; what each request that ends a run of turns does.
        self.actions: dict[str, Callable[[Any], None]] = {
            "Record": self.record,
            "Replan": self.replan,
            "SetPhase": self.set_phase,
            "MergeAdapters": lambda _: self.merge_adapters(),
            "SetBatch": self.set_batch,
            "ScaleDropout": self.scale_dropout,
            "DropSamples": self.drop_samples,
            "Quarantine": self.quarantine,
            "SkipBatches": self.skip_batches,
            "Checkpoint": self.checkpoint,
        }
        self.requests: dict[str, Callable[[Any], dict[str, Any]]] = {
            "CheckPipeline": self.check_pipeline,
            "RoundTrip": self.round_trip,
            "Evaluate": self.evaluate,
            "Prune": self.prune,
            "MeasureSensitivity": self.measure_sensitivity,
            "MeasureJoint": self.measure_joint,
            "MeasureSampleLosses": self.measure_sample_losses,
            "Restore": self.restore,
            "Export": self.export,
            "Distil": self.distil,
            "Quantize": self.quantize,
            "ReadHoldout": self.read_holdout,
        }
        self.ends: dict[str, Callable[[Any], None]] = {
            "Train": self.train,
            "Finish": self.finish,
            "Fail": self.fail,
        }

    # ---- the run ------------------------------------------------------------------------------

    def info(self) -> RunInfo:
        """What the conductor is told of the run."""
        m = self.job.model
        return RunInfo(
            train_samples=len(self.job.train_dataset()),
            classes=self.classes,
            weights=[name for name, _ in matrices(m)],
            heads=head_count(m),
            job_steps=self.job_steps,
            gradient_checkpointing=self.recomputing,
            tuning=tuning(m),
            task=task(m),
        )

    def checkpointing(self) -> bool:
        """Gradient checkpointing as the run trains: the job's own, or turned on here (on every
        rank) for the recipe's ``model.gradient_checkpointing``; a model that cannot is refused."""
        if recomputes(self.job.model):
            return True
        recipe = json.loads(_core.recipe_json(self.recipe_toml, self.recipe_path))
        if not recipe["model"].get("gradient_checkpointing", False):
            return False
        if recompute(self.job.model):
            return True
        raise ValueError(
            f"{self.recipe_path}: model.gradient_checkpointing = true, but {type(unwrap(self.job.model)).__name__} "
            "holds no transformers model that supports it (supports_gradient_checkpointing): wrap its blocks in "
            "torch.utils.checkpoint.checkpoint(..., use_reentrant=False) yourself, or set it to false")

    def start(self, resume: dict[str, Any] | None = None) -> None:
        """Opens the run directory and the conductor (fresh, or resumed from a checkpoint's
        record), then carries out the first turn."""
        lens = (0, 0) if resume is None else (resume["metrics_len"], resume["decisions_len"])
        self.remember_dropout()
        self.recomputing = self.checkpointing()
        if self.leader:
            self.lock = hold(self.run_dir)
            # quarantine.jsonl: a new run starts it empty, a resume cuts it back to its checkpoint
            # (a record written before it had a length keeps it whole).
            quarantine = 0 if resume is None else resume.get("quarantine_len")
            self.writer = _core.RunWriter(str(self.run_dir), WRITER, lens[0], lens[1], quarantine)
            if resume is None:
                self.conductor = Conductor(self.recipe_toml, self.info(), self.recipe_path)
            else:
                history = self.writer.history(lens[0])
                self.conductor = Conductor(self.recipe_toml, self.info(), self.recipe_path,
                                           state=resume["conductor"], history=history)
            # The recipe in force: main's steps laid on the job's budget when it gave them.
            (self.run_dir / "recipe.toml").write_text(self.conductor.recipe_toml())
        if resume is not None:
            self.step = resume["step"]
            self.samples = resume["samples"]
            self.lost_steps = resume.get("lost_steps", 0)
            self.masks = resume_masks(resume)
            if self.leader:
                self.rejoin_checkpoints(resume)
        self.run(self.next_turn())
        if resume is not None and self.failed is None:
            differs = check_lr(resume.get("next_lr"), self.plan["lr"] if self.plan is not None else None)
            if differs is not None:
                self.failed = f"resume: {differs}"

    def next_turn(self, observation: Any = None) -> Turn | None:
        """Rank 0's next turn from the conductor (the first without ``observation``); ``None`` on
        the other ranks, which get rank 0's (``share``)."""
        if not self.leader:
            return None
        if self.conductor is None:
            raise RuntimeError("the engine has no conductor: start() opens it")
        return self.conductor.begin() if observation is None else self.conductor.observe(observation)

    def run(self, turn: Turn | None) -> None:
        """Carries out turns until the conductor asks for a training step, the end, or a stop.
        Rank 0 decides; every rank carries out the same turn (``share``)."""
        while True:
            turn = self.share(turn)
            for action in turn["actions"]:
                self.carry_out(action)
            name, payload = kind(turn["request"])
            end = self.ends.get(name)
            if end is not None:
                end(payload)
                return
            turn = self.next_turn(self.answer(name, payload))

    def answer(self, name: str, payload: Any) -> dict[str, Any]:
        """The observation a request asks for, from its entry in ``requests``."""
        handler = self.requests.get(name)
        if handler is None:
            raise RuntimeError(f"the conductor asked for {name!r}, which the PyTorch engine does not carry out "
                               f"(it knows {', '.join(sorted([*self.requests, *self.ends]))}): the "
                               "package's Python and its Rust core come from different versions")
        return handler(payload)

    def train(self, plan: dict[str, Any]) -> None:
        """The framework's next optimizer step runs the plan (its step, phase and LR)."""
        self.plan = plan
        self.set_lr(plan["lr"])

    def fail(self, payload: dict[str, str]) -> None:
        """The conductor stopped the run: the framework adapter raises with the reason."""
        ((why, reason),) = payload.items()
        self.failed = f"{why}: {reason}"

    def share(self, turn: Turn | None) -> Turn:
        """The turn rank 0 got, on every rank (identity on one process)."""
        turn = self.from_leader(turn)
        if self.turn_log is not None:
            self.turn_log.write(json.dumps(turn) + "\n")
            self.turn_log.flush()
        return turn

    def from_leader(self, obj: Any) -> Any:
        """``obj`` as rank 0 has it, on every rank (identity on one process)."""
        if not distributed(self.job.world):
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def stepped(self, loss: float | None, grad_norm: float | None, rows: list[int] | None = None,
                length: float | None = None) -> None:
        """An optimizer step finished: count it, log it, and carry out the conductor's answer.
        ``rows``: the training rows its batch held, over all ranks (spike triage tells a data cause
        by them; empty: not known); ``length``: its mean tokens a sample."""
        plan = self.plan
        if plan is None:
            return
        finite = all(x is None or math.isfinite(x) for x in (loss, grad_norm))
        if not finite:
            self.lost_steps += 1
        else:
            self.apply_masks()
            self.step += 1
            self.samples += self.batch
            if self.leader and loss is not None:
                self.metric({"step": self.step, "phase": plan["phase"], "samples": self.samples,
                             "train_loss": loss, "lr": plan["lr"],
                             "grad_norm": grad_norm if grad_norm is not None else 0.0,
                             "batch_size": self.batch, "wall_s": round(time.time() - self.started, 2)})
        self.plan = None
        obs = {"Stepped": {"loss": loss, "grad_norm": grad_norm, "lr": plan["lr"], "rows": rows or [],
                           "length": length}}
        self.run(self.next_turn(obs))

    def stop_for(self, signum: int) -> None:
        """A stop signal the ranks agreed on, after this step: the record a checkpoint of it keeps
        (the conductor waits for the next step; a resume continues from here)."""
        self.stopped_by = signum
        if self.conductor is not None:
            self.last_record = self.record_of(self.conductor.state())
        else:  # a rank other than 0: the record is rank 0's; this one only marks the step saved
            self.last_record = {"step": self.step}

    def release(self) -> None:
        """The run directory let go (the job is over, however it ended)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
            HELD.pop(self.run_dir.resolve(), None)

    def stopped_early(self, framework_step: int, planned: int, setting: str) -> None:
        """The framework's training ended before the conductor finished: recorded, with the step
        limit the plan needs (``setting`` formats it: ``"Trainer(max_steps={})"``). A stop on a
        signal is not that: the job resumes from its checkpoint."""
        if self.finished is not None or self.failed is not None or self.stopped_by is not None:
            return
        need = planned + self.lost_steps
        self.substitute(
            "the lifecycle's end",
            f"training stopped at the trainer's step {framework_step} before the conductor finished (final "
            f"model, holdout and eval.json not written); the plan needs {need} optimizer steps ({planned} "
            f"planned + {self.lost_steps} failed or taken back by rollbacks): set {setting.format(need)}, with "
            "epochs enough for it, and resume from the last checkpoint",
            {"trainer_step": framework_step, "lifecycle_step": self.step, "max_steps": need})
        if self.leader:
            self.writer.sync()

    # ---- actions ------------------------------------------------------------------------------

    def carry_out(self, action: Any) -> None:
        """An action of a turn, by its entry in ``actions``."""
        name, p = kind(action)
        handler = self.actions.get(name)
        if handler is None:
            raise RuntimeError(f"the conductor ordered the action {name!r}, which the PyTorch engine does not carry "
                               f"out (it knows {', '.join(sorted(self.actions))}): the package's Python and its "
                               "Rust core come from different versions")
        handler(p)

    def record(self, decision: dict[str, Any]) -> None:
        """A decision into ``decisions.jsonl`` (rank 0), and on the log."""
        if self.leader:
            self.writer.decide(json.dumps(decision))
            print(f"[contrai] [{decision['phase']} step {decision['step']}] {decision['kind']}: {decision['reason']}")
            self.trackers.decision(decision)

    def replan(self, plan: dict[str, Any]) -> None:
        """``plan.json`` as the conductor now plans the run (rank 0)."""
        if self.leader:
            self.writer.write("plan", json.dumps(plan))

    def set_phase(self, p: dict[str, Any]) -> None:
        """The phase the next turns belong to (on the job's trackers)."""
        self.phase = p["phase"]
        if self.leader:
            self.trackers.phase(self.phase)

    def substitute(self, what: str, instead: str, evidence: dict[str, Any]) -> None:
        """Records what the engine did instead of a decision it could not carry out as asked."""
        self.substitutes.append((what, instead))
        self.record({"step": self.step, "phase": self.phase, "kind": "engine_substitute",
                     "reason": f"{what}: {instead}", "evidence": evidence})

    def metric(self, row: dict[str, Any]) -> None:
        """A row into ``metrics.jsonl`` (rank 0)."""
        if self.leader:
            self.writer.metric(words_json(row))

    def set_lr(self, lr: float) -> None:
        """The next step's learning rate, in every parameter group (the framework's scheduler is
        told to keep it)."""
        opt = self.job.optimizer
        if opt is not None:
            for g in opt.param_groups:
                g["lr"] = lr

    def set_batch(self, batch: int) -> None:
        """The phase's per-device batch. A running data loader keeps its own: a different one is
        recorded with what to do to get it."""
        self.batch = self.job_batch()
        per_device = getattr(self.job, "per_device_batch", batch)
        if batch == per_device or (self.phase, batch) in self.batches_noted:
            return
        self.batches_noted.add((self.phase, batch))
        self.substitute(
            f"per-device batch {batch} asked for {self.phase}",
            f"the running data loader keeps {per_device}; to train {self.phase} at {batch}, resume from the "
            f"last checkpoint (step {self.step}) with per-device batch {batch}",
            {"asked": batch, "kept": per_device, "step": self.step},
        )

    def job_batch(self) -> int:
        """Samples a training step sees (per device × devices × accumulation)."""
        return getattr(self.job, "effective_batch", 0) or 0

    def remember_dropout(self) -> None:
        """The model's own dropout probabilities (the scale applies to these)."""
        for name, p in dropout_sites(self.job.model):
            self.base_dropout[name] = p

    def scale_dropout(self, scale: float) -> None:
        """Every dropout probability of the model × ``scale``: ``nn.Dropout`` modules, the
        attention-dropout attributes modules read at forward time, and the config's."""
        self.dropout_scale = scale
        set_dropout(self.job.model, {k: v * scale for k, v in self.base_dropout.items()})

    def drop_samples(self, p: dict[str, Any]) -> None:
        """The rows the conductor names out of training (a :class:`DroppableDataset` serves them no
        more); another dataset keeps them, recorded."""
        rows: list[int] = p["rows"]
        ds = self.job.train_dataset()
        if isinstance(ds, DroppableDataset):
            ds.drop(rows)
            self.drops += 1
            return
        self.substitute(
            f"drop {len(rows)} noisy training samples",
            "they stay: the train dataset is not a contrai.DroppableDataset (wrap it to drop them)",
            {"rows": rows},
        )

    def quarantine(self, entry: dict[str, Any]) -> None:
        """A spike's batch into ``quarantine.jsonl`` (rank 0), and on the log."""
        if self.leader:
            self.writer.quarantine(json.dumps(entry))
            print(f"[contrai] [{entry['phase']} step {entry['step']}] quarantined {len(entry['rows'])} rows "
                  f"({entry['cause']}; loss {entry['loss']} over {entry['threshold']})")

    def skip_batches(self, p: dict[str, Any]) -> None:
        """The batches spike triage took out (all so far, by step and rows). A restore never rewinds
        the running data loader — the retried steps see later batches — so a quarantined batch is
        not drawn again at its step; they are kept for a loader that replays."""
        self.skipped_batches: list[dict[str, Any]] = p["batches"]

    # ---- masks --------------------------------------------------------------------------------

    def prune(self, order: dict[str, Any]) -> dict[str, Any]:
        """The masks grown to the order's sparsity (whole heads and units where asked and shown) and
        applied; the sparsity of each module."""
        model = unwrap(self.job.model)
        whole = self.masks.update(model, order, self.unit_inputs(model, order) if order.get("units") else None)
        self.whole |= whole
        self.structure_unavailable(order, {_core.module_of(p) for p in order["targets"]}, whole)
        if self.leader:
            self.checkpoints.keep_originals(model, self.masks.keep)
        self.apply_masks()
        return {"Pruned": {"sparsity": self.sparsity_row()}}

    def apply_masks(self) -> None:
        """Pruned weights back to exactly zero (after every optimizer step)."""
        self.masks.apply(unwrap(self.job.model))

    def sparsity_row(self) -> dict[str, float]:
        by_module = self.masks.by_module()
        row: dict[str, Any] = {"step": self.step, "phase": self.phase, "sparsity": self.masks.overall()}
        row.update({f"sparsity/{m}": s for m, s in by_module.items()})
        self.metric(row)
        return by_module


# The run directories this process holds, by path: one writer per directory is a rule between
# processes; a job run again in the same process (a notebook, a test) takes over its own lock.
HELD: dict[Path, _core.RunLock] = {}


def hold(run_dir: Path) -> _core.RunLock:
    """The run directory's lock (``contrai train``'s, an OS lock): this process's own if it holds
    it already, else taken; ``OSError`` naming the process that holds it."""
    key = run_dir.resolve()
    if key not in HELD:
        HELD[key] = _core.RunLock(run_dir)
    return HELD[key]


Hook = Callable[[], None]
