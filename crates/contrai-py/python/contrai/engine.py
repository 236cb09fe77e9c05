"""The PyTorch engine: it carries out the conductor's decisions on a ``torch.nn.Module`` inside a
running job (Hugging Face ``Trainer`` or Lightning) and reports what happened.

It holds no lifecycle rule: when to evaluate, checkpoint, prune, roll back or move on is the
conductor's (in the Rust core). How to do it on a PyTorch model is here. What the engine cannot
do as asked it records as an ``engine_substitute`` decision — never silently.

The framework adapters (``contrai.hf``, ``contrai.lightning``) give it a :class:`Job`: the model,
the optimizer, the data and the model's outputs on a batch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
import torch.nn.functional as F

from . import _core
from .adapters import adapted_weights, fit_scheduler, merge, merged, split, unloaded
from .batches import batch_size, token_rows
from .card import Variant, card, describe, disk_bytes, dtype_name, latency_ms, nan0
from .checkpoints import Checkpoints, load_weights, put_back
from .compact import Cut, cut_in_place, units_removed
from .conductor import Conductor, RunInfo, kind
from .data import DroppableDataset
from .masks import Masks, head_count, matrices, unit_inputs
from .model import (class_names, dropout_sites, evaluating, first_device, recompute, recomputes, set_dropout, task,
                    tuning, unwrap)
from .protocol import State, Turn
from .resume import check_lr
from .rows import words_json
from .trackers import Sink, Trackers, figures
from .variants import Variants
from .weightquant import each_pass

WRITER = f"contrai-ml {_core.__version__} (pytorch engine)"
# The key that marks the optimizer parameter group of a LoRA job's merged weights (a saved
# optimizer state keeps it).
MERGED = "contrai_merged"
# Training samples whose activations score feed-forward units for pruning and calibrate GPTQ.
CALIBRATION = 64
# Rollback checkpoints kept besides the best ones (and the Trainer's own, unless it was told).
KEEP_LAST = 3


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


def trained_past_merge(model: torch.nn.Module, recipe_toml: str, recipe_path: str) -> list[str]:
    """The matrices a LoRA job trains past main, in the order their optimizer group holds them:
    those its LoRA layers adapt, then those the recipe prunes (``_core.pruned_weights``)."""
    pruned = _core.pruned_weights(recipe_toml, recipe_path, [n for n, _ in matrices(model)])
    return list(dict.fromkeys(adapted_weights(model) + pruned))


def train_also(model: torch.nn.Module, optimizer: Any, schedulers: list[Any], names: list[str]) -> int:
    """The frozen matrices among ``names`` made trainable, in one new optimizer parameter group
    (marked ``MERGED``) with the first group's LR and weight decay, the schedulers fitted to it;
    how many."""
    params = dict(matrices(model))
    new = [params[n] for n in names if n in params and not params[n].requires_grad]
    for w in new:
        w.requires_grad_(True)
    if optimizer is not None and new:
        first = optimizer.param_groups[0]
        optimizer.add_param_group({"params": new, "lr": first["lr"], "weight_decay": first.get("weight_decay", 0.0),
                                   MERGED: True})
        fit_schedulers(optimizer, schedulers)
    return len(new)


def fit_schedulers(optimizer: Any, schedulers: list[Any]) -> None:
    """LR schedulers fitted to the optimizer's parameter groups (``fit_scheduler``)."""
    if optimizer is not None:
        for s in schedulers:
            fit_scheduler(s, len(optimizer.param_groups))


class Engine:
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
        self.last_record: dict[str, Any] | None = None
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

    def rejoin_checkpoints(self, record: dict[str, Any]) -> None:
        """The rollback checkpoints as a job resumed from ``record`` needs them: those after its
        step are another run's future (a job resumed from an older framework checkpoint) and go;
        one of its step, when keep-last removed it, is written from the model and optimizer the
        framework loaded — a rollback must land on this run's past."""
        step = record["step"]
        self.checkpoints.drop_after(step)
        if step in self.checkpoints.steps():
            return
        own = {k: v for k, v in record.items() if k not in ("next_lr", "order", "rng", "masks_file", "masks_keep")}
        # Every checkpoint there stays: which are the best is the conductor's to say, at its next.
        self.checkpoints.write(step, unwrap(self.job.model), self.job.optimizer, self.masks, own,
                               self.checkpoints.steps())

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
        """The phase the next turns belong to (on the job's trackers); past main, a LoRA job's
        adapters merged."""
        self.phase = p["phase"]
        if self.leader:
            self.trackers.phase(self.phase)
        if self.phase not in ("validate", "main"):
            self.merge_adapters()

    def merge_adapters(self) -> None:
        """A LoRA job's adapters merged into the weights they adapt (``contrai.adapters``), once;
        from then on the merged matrices and those the recipe prunes train (optimizer state for
        them alone: a large model's other weights stay frozen). Their values before are kept
        (``Checkpoints.keep_originals``): a rollback to main's checkpoints needs them back. Under
        DDP the adapters stay apart (recorded): DDP syncs only what trained when it wrapped the model."""
        model = getattr(self.job, "model", None)  # a job may hold no model (the engine's own tests)
        if model is None or tuning(unwrap(model)) != "lora" or merged(unwrap(model)):
            return
        model = unwrap(model)
        if distributed(self.job.world):
            self.substitute("merge the LoRA adapters when main ends",
                            "kept apart: DDP syncs the gradients of what trained when it wrapped the model, and "
                            "the merged weights were frozen then; pruned base weights can be refilled by their "
                            "adapters", {"world": self.job.world})
            return
        trains = trained_past_merge(model, self.recipe_toml, self.recipe_path)
        if self.leader:
            self.checkpoints.keep_originals(model, trains)
        merge(model)
        added = train_also(model, self.job.optimizer, self.job.schedulers(), trains)
        if self.leader:
            print(f"[contrai] LoRA: {len(adapted_weights(model))} adapted weights merged; {added} weight matrices "
                  f"train from here (merged or pruned)")

    def split_adapters(self) -> None:
        """Undoes :meth:`merge_adapters` before a restore to a checkpoint written before it (main's,
        after a rollback): the merged group leaves the optimizer, its matrices freeze again, and
        the layers hold their adapters apart — the restore puts back the base weights' values from
        before the merge (their originals) and the checkpoint's adapters and optimizer."""
        model = unwrap(self.job.model)
        opt = self.job.optimizer
        if opt is not None:
            for group in [g for g in opt.param_groups if g.get(MERGED)]:
                for w in group["params"]:
                    opt.state.pop(w, None)
                    w.requires_grad_(False)
            opt.param_groups[:] = [g for g in opt.param_groups if not g.get(MERGED)]
            fit_schedulers(opt, self.job.schedulers())
        split(model)

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

    # ---- checkpoints --------------------------------------------------------------------------

    def record_of(self, conductor_state: State) -> dict[str, Any]:
        """What a checkpoint needs besides the tensors: counters, journal lengths, the state."""
        lens = self.writer.sync() if self.leader else (0, 0)
        quarantine = self.writer.quarantine_len() if self.leader else 0
        return {"format": 1, "step": self.step, "samples": self.samples, "metrics_len": lens[0],
                "decisions_len": lens[1], "quarantine_len": quarantine, "lost_steps": self.lost_steps,
                "merged": merged(unwrap(self.job.model)), "conductor": conductor_state}

    def resume_record(self) -> dict[str, Any] | None:
        """The latest checkpoint's record as a framework saves it between steps: with the LR the
        next step runs at (a resume checks it)."""
        if self.last_record is None:
            return None
        return {**self.last_record, "next_lr": self.plan["lr"] if self.plan is not None else None}

    def checkpoint(self, p: dict[str, Any]) -> None:
        """What training changed, the masks and the record with the conductor's ``state`` (rank 0;
        the weights are the same on every rank); the best checkpoints (``keep``) are never removed."""
        self.last_record = self.record_of(p["state"])
        if self.leader:
            self.checkpoints.write(self.step, unwrap(self.job.model), self.job.optimizer, self.masks,
                                   self.last_record, p["keep"])

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

    # ---- measurements -------------------------------------------------------------------------

    def evaluation(self, model: torch.nn.Module, batches: Iterable[Any] | None,
                   sharded: bool = True) -> tuple[float, float, int]:
        """Mean loss, accuracy and samples of ``model`` on ``batches`` (summed over ranks when
        each rank holds a shard of them)."""
        if batches is None:
            return math.nan, math.nan, 0
        total, n, correct, counted = 0.0, 0, 0, 0
        with evaluating(model), torch.no_grad():
            for b in batches:
                out = self.job.outputs(model, b)
                total += float(out.losses.sum())
                n += out.losses.numel()
                correct += out.correct
                counted += out.counted
        if sharded:
            sums = self.job.all_reduce([total, n, correct, counted])
            total, n, correct, counted = sums[0], int(sums[1]), int(sums[2]), int(sums[3])
        if n == 0:
            return math.nan, math.nan, 0
        return total / n, (correct / counted if counted else math.nan), int(n)

    def evaluate(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validation loss and accuracy of the model now (a metrics row when ``record`` names a phase)."""
        loss, acc, _ = self.evaluation(self.job.model, self.job.eval_batches())
        if p["record"] is not None:
            self.metric({"step": self.step, "phase": p["record"], "val_loss": loss, "val_accuracy": nan0(acc)})
        return {"Evaluated": {"val_loss": loss, "val_accuracy": nan0(acc)}}

    def check_pipeline(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validate's check: the fresh model overfits one batch (dropout off); its trainable
        weights are put back after (in place: a large model has no room for a copy). Reports the
        trainable parameters no step gave a gradient (a LoRA ``A`` gets its first once ``B`` has
        moved from zero, so every step counts)."""
        model = unwrap(self.job.model)
        named = {n: w for n, w in model.named_parameters() if w.requires_grad}
        trainable: list[torch.Tensor] = list(named.values())
        missing = set(named)
        batch = self.job.train_batch()
        losses = []
        with put_back(trainable), evaluating(model):
            opt = torch.optim.AdamW(trainable, lr=p["lr"])
            for _ in range(p["steps"]):
                opt.zero_grad()
                loss = self.job.outputs(model, batch).losses.mean()
                loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
                missing = {n for n in missing if (g := named[n].grad) is None or not bool(g.any())}
                opt.step()
                losses.append(float(loss.detach()))
                self.step += 1
                self.metric({"step": self.step, "phase": "validate", "validate_loss": losses[-1]})
            del opt
        val, _, _ = self.evaluation(self.job.model, self.job.eval_batches())
        return {"PipelineChecked": {"first_loss": losses[0], "last_loss": losses[-1], "val_loss": val,
                                    "no_gradient": sorted(missing), "losses": losses}}

    def round_trip(self, _: Any) -> dict[str, Any]:
        """A checkpoint of the fresh model written and read back into it by the checkpoints' own
        code; its outputs before and after must be identical."""
        model = unwrap(self.job.model)
        # Rank 0 proves the run directory's disk; the others (whose answer is not used) their own.
        root = self.run_dir / "checkpoints" / ".round-trip" if self.leader else Path(tempfile.mkdtemp())
        trip = Checkpoints(root, keep_last=1)
        trip.write(0, model, self.job.optimizer, self.masks, {"step": 0}, [])
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

    def unit_inputs(self, model: torch.nn.Module, order: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The targeted feed-forward units' squared inputs to their projections over the first
        ``CALIBRATION`` training samples (summed over ranks: every rank prunes alike), what whole
        units are scored by (``Masks.update_groups``)."""

        def forward() -> None:
            with evaluating(model), torch.no_grad():
                for b in self.calibration_batches():
                    self.job.outputs(self.job.model, b)

        sums = unit_inputs(model, forward, order["targets"])
        keys = list(sums)
        if not keys:
            return {}
        flat = torch.tensor(self.job.all_reduce(torch.cat([sums[k] for k in keys]).tolist()), dtype=torch.float64)
        return dict(zip(keys, torch.split(flat, [sums[k].numel() for k in keys])))

    def calibration_batches(self) -> Iterator[Any]:
        """The batches of the first ``CALIBRATION`` training samples, in row order: what whole units
        are scored on and GPTQ's Hessians measured on."""
        seen = 0
        for rows, b in self.job.train_rows():
            yield b
            seen += len(rows)
            if seen >= CALIBRATION:
                return

    def calibrate(self) -> None:
        """The job's model run on the calibration batches in eval mode (GPTQ's ``Calibrate``)."""
        with evaluating(unwrap(self.job.model)):
            each_pass(lambda b: self.job.logits(self.job.model, b), self.calibration_batches())

    def summed(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over the job's ranks, in place."""
        if distributed(self.job.world):
            torch.distributed.all_reduce(t)
        return t

    def apply_masks(self) -> None:
        """Pruned weights back to exactly zero (after every optimizer step)."""
        self.masks.apply(unwrap(self.job.model))

    def sparsity_row(self) -> dict[str, float]:
        by_module = self.masks.by_module()
        row: dict[str, Any] = {"step": self.step, "phase": self.phase, "sparsity": self.masks.overall()}
        row.update({f"sparsity/{m}": s for m, s in by_module.items()})
        self.metric(row)
        return by_module

    def measure_sample_losses(self, _: Any) -> dict[str, Any]:
        """The loss of every training sample under the current model (eval mode), in row order."""
        model = self.job.model
        losses: list[float] = []
        with evaluating(model), torch.no_grad():
            for _, b in self.job.train_rows():
                losses.extend(float(x) for x in self.job.outputs(model, b).losses)
        ds = self.job.train_dataset()
        ids = [str(i) for i in range(len(losses))]
        if ds is not None and hasattr(ds, "ids"):
            ids = [str(x) for x in ds.ids]
        return {"SampleLosses": {"losses": losses, "ids": ids}}

    def structure_unavailable(self, asked: dict[str, Any], modules: set[str], whole: set[str]) -> None:
        """Whole heads or units asked for ``modules`` that the model's names do not show (heads:
        the BERT family's; units: BERT's and Llama's feed-forward layers): recorded once each,
        single weights pruned instead."""
        attention = any(_core.is_attention(m) for m in modules)
        wanted = [
            ("prune whole attention heads", "attention", "contract.prune_heads",
             asked.get("heads") is not None and attention and "heads" not in whole),
            ("prune whole feed-forward units", "feed-forward layers", "contract.prune_units",
             bool(asked.get("units")) and any(not _core.is_attention(m) for m in modules) and "units" not in whole),
        ]
        for what, where, key, on in wanted:
            if on and not any(w.startswith(what) for w, _ in self.substitutes):
                self.substitute(what, f"the PyTorch engine prunes {where} by single-weight magnitude instead "
                                "(the model's parameter names do not show them)", {"asked": key})

    def measure_sensitivity(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validation loss with each module pruned alone at each level (diagnose's scan), on the
        evenly spread batches ``samples`` asks for, each module's levels stopped after the first
        that costs more than ``stop_above``; the unpruned loss on the same batches with them.
        ``linearized``: every level estimated at once (``linearized``) where the model is a
        classifier; a token model's are measured (recorded)."""
        model = unwrap(self.job.model)
        batches = list(spread_batches(self.job.eval_batches(), p.get("samples")))
        if p.get("linearized"):
            estimated = self.linearized(model, p, batches)
            if estimated is not None:
                return estimated
            self.substitute("estimate each module's pruning sensitivity from logit gradients",
                            "a token model's vocabulary has too many logits to take each one's gradient: "
                            "each module is pruned and evaluated on the same samples instead", {"asked": "diagnose"})
        base, _, _ = self.evaluation(model, batches)
        out: dict[str, list[float]] = {}
        whole: set[str] = set()
        stop = p.get("stop_above")
        for i, module in enumerate(p["modules"]):
            losses: list[float] = []
            for level in p["levels"]:
                losses.append(self.pruned_loss(model, {module: level}, p, whole, batches))
                if stop is not None and (losses[-1] - base) / max(abs(base), 1e-12) > stop:
                    break
            out[module] = losses
            if self.leader:
                rises = ", ".join(f"{100 * lv:.0f} % {100 * (v - base) / max(abs(base), 1e-12):+.1f} %"
                                  for lv, v in zip(p["levels"], losses))
                print(f"[contrai] diagnose: {module} pruned alone: {rises} ({i + 1} of {len(p['modules'])})")
        self.structure_unavailable(p, set(p["modules"]), whole)
        return {"Sensitivity": {"val_loss": out, "base": base}}

    def linearized(self, model: torch.nn.Module, p: dict[str, Any],
                   batches: list[Any]) -> dict[str, Any] | None:
        """Each module's loss at each level estimated as the Burn engine does
        (``measure::linearized``): for each sample alone, the gradient of every logit's margin
        over class 0 times the weights a level removes moves that margin; the cross-entropy of
        the moved logits, averaged (over ranks too), is the level's loss. None for a token model."""
        modules, levels = p["modules"], p["levels"]
        params = dict(matrices(model))
        first: dict[str, torch.Tensor] = {}
        owner: dict[str, int] = {}
        whole: set[str] = set()
        for i, module in enumerate(modules):
            for li in reversed(range(len(levels))):
                m = Masks()
                whole |= m.prune_modules(model, {module: levels[li]}, p.get("heads"), bool(p.get("units")))
                for path, keep in m.keep.items():
                    f = first.setdefault(path, torch.full(keep.shape, math.inf, device=params[path].device))
                    f[~keep.to(f.device)] = li
                    owner[path] = i
        paths = list(first)
        if self.leader:
            print(f"[contrai] diagnose: estimating {len(modules)} modules at {len(levels)} levels from each "
                  "validation sample's logit gradients, one sample at a time")
        sums = torch.zeros(len(modules), len(levels), dtype=torch.float64)
        base, n = 0.0, 0
        was, tracked = model.training, [params[q].requires_grad for q in paths]
        model.eval()
        for q in paths:
            params[q].requires_grad_(True)
        try:
            for one in (x for b in batches for x in single_samples(b)):
                logits, labels = self.job.logits(model, one)
                if logits.dim() != 2:
                    return None
                z, y = logits[0].float(), int(labels[0])
                moves = torch.zeros(len(modules), len(levels), z.numel(), dtype=torch.float64)
                for c in range(1, z.numel()):
                    grads = torch.autograd.grad(z[c] - z[0], [params[q] for q in paths],
                                                retain_graph=c < z.numel() - 1, allow_unused=True)
                    for q, g in zip(paths, grads):
                        if g is not None:
                            prod = (g * params[q].detach()).flatten().double()
                            code = first[q].flatten()
                            for li in range(len(levels)):
                                # Removing w moves the margin by −g·w.
                                moves[owner[q], li, c] -= float(prod[code <= li].sum())
                z0 = z.detach().double().cpu()
                moved = z0 + moves
                sums += torch.logsumexp(moved, -1) - moved[..., y]
                base += float(torch.logsumexp(z0, -1) - z0[y])
                n += 1
        finally:
            model.train(was)
            for q, t in zip(paths, tracked):
                params[q].requires_grad_(t)
        total = self.job.all_reduce([base, float(n), *sums.flatten().tolist()])
        count = max(total[1], 1.0)
        base = total[0] / count
        losses = torch.tensor(total[2:], dtype=torch.float64).view(len(modules), len(levels)) / count
        out = {m: [float(v) for v in losses[i]] for i, m in enumerate(modules)}
        self.structure_unavailable(p, set(modules), whole)
        if self.leader:
            for i, m in enumerate(modules):
                rises = ", ".join(f"{100 * lv:.0f} % {100 * (v - base) / max(abs(base), 1e-12):+.1f} %"
                                  for lv, v in zip(levels, out[m]))
                print(f"[contrai] diagnose: {m} pruned alone, estimated on {int(count)} validation samples: "
                      f"{rises} ({i + 1} of {len(modules)})")
        return {"Sensitivity": {"val_loss": out, "base": base}}

    def measure_joint(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validation loss with every module pruned at once to the proposed sparsity (on the
        evenly spread batches ``samples`` asks for, all when None)."""
        whole: set[str] = set()
        batches = spread_batches(self.job.eval_batches(), p.get("samples"))
        loss = self.pruned_loss(unwrap(self.job.model), p["sparsity"], p, whole, batches)
        self.structure_unavailable(p, set(p["sparsity"]), whole)
        return {"JointLoss": {"val_loss": loss}}

    def pruned_loss(self, model: torch.nn.Module, sparsity: dict[str, float], asked: dict[str, Any],
                    whole: set[str], batches: Iterable[Any]) -> float:
        """Loss of ``model`` on ``batches`` with ``sparsity`` applied (whole heads and units where
        ``asked`` and shown), the pruned matrices put back after; ``whole`` gains the structures
        pruned whole."""
        m = Masks()
        whole |= m.prune_modules(model, sparsity, asked.get("heads"), bool(asked.get("units")))
        params = dict(matrices(model))
        with put_back([params[path] for path in m.keep]):
            m.apply(model)
            loss, _, _ = self.evaluation(model, batches)
        return loss

    # ---- the end ------------------------------------------------------------------------------

    def export(self, _: Any) -> dict[str, Any]:
        """The final weights (masks applied) in ``final/``, evaluated on validation: a LoRA job's
        merged model without PEFT's layers (``adapters.unloaded``), a Hugging Face model's pruned
        feed-forward units cut out of it in place (``cut_units``) — the model quantized and served
        from here on."""
        self.apply_masks()
        self.export_note = "LoRA adapters merged" if merged(unwrap(self.job.model)) else ""
        model = self.final = unloaded(unwrap(self.job.model))
        self.pruned = self.masks.by_module()
        self.cut_units(model)
        self.exported = describe(model.state_dict())
        fin = self.run_dir / "final"
        if self.leader:
            fin.mkdir(parents=True, exist_ok=True)
            save = getattr(model, "save_pretrained", None)
            if save is not None:
                tok = self.job.tokenizer()
                if hasattr(tok, "save_pretrained"):
                    tok.save_pretrained(fin)
                save(fin)
            else:
                torch.save(model.state_dict(), fin / "model.pt")
        loss, acc, _ = self.evaluation(self.job.model, self.job.eval_batches())
        self.final_val = (loss, acc)
        return {"Exported": {"val_loss": loss, "val_accuracy": nan0(acc)}}

    def cut_units(self, model: torch.nn.Module) -> None:
        """A Hugging Face model's pruned feed-forward units cut out of it in place, on every rank,
        as far as one ``intermediate_size`` allows (``compact``); what stays as zeros recorded."""
        if not hasattr(model, "save_pretrained"):
            return
        if "heads" in self.whole:
            self.substitute("remove the pruned attention heads from the exported model",
                            "transformers 5 prunes no heads (no config.pruned_heads): they stay as zeros", {})
        cut = units_removed(model, self.masks)
        if not isinstance(cut, Cut):
            if cut is not None:
                self.substitute("remove the pruned feed-forward units from the exported model", cut, {})
            return
        cut_in_place(model, cut, self.masks)
        self.export_note = "; ".join(x for x in (self.export_note, f"pruned feed-forward units cut out "
                                                 f"(intermediate_size {cut.before} → {cut.after})") if x)
        if self.leader:
            print(f"[contrai] pruned feed-forward units cut out, intermediate_size {cut.before} -> {cut.after}")
        if cut.left:
            self.substitute("remove the pruned feed-forward units from the exported model",
                            f"{cut.before - cut.after} a layer cut out (the fewest any layer lost); {cut.left} more "
                            "stay as zeros: a Hugging Face config holds one intermediate_size",
                            {"intermediate_size": cut.after, "units_left_as_zeros": cut.left})

    def pruned_share(self) -> dict[str, float]:
        """Each pruned module's share of zero weights as pruning left it — before any cut took
        units out (the cut model's masks cover what remains)."""
        return self.pruned if self.pruned is not None else self.masks.by_module()

    def distil(self, _: Any) -> dict[str, Any]:
        """Declined: the PyTorch engine does not distil; the fine-tuned model is the final one."""
        return {"Declined": {"what": "distil into the recipe's student",
                             "instead": "the PyTorch engine does not distil yet; the fine-tuned model is the final one"}}

    def quantize(self, p: dict[str, Any]) -> dict[str, Any]:
        """A weight-only variant of the final model (``p["to"]``: int8 or int4), made and evaluated
        on validation in place (``contrai.variants``)."""
        return self.variants.make(p["to"], p["block"], self.served(),
                                  lambda: self.evaluation(self.job.model, self.job.eval_batches())[:2])

    def served(self) -> torch.nn.Module:
        """The exported model (``export``), else the job's."""
        return self.final if self.final is not None else unwrap(self.job.model)

    def read_holdout(self, p: dict[str, Any]) -> dict[str, Any]:
        """The holdout, read once: the final model and each quantized variant (its codes put in
        place again, as validation saw them) evaluated on it; a variant's files written when its
        verdict keeps it."""
        batches = self.job.holdout_batches()
        loss, acc, n = self.evaluation(self.job.model, batches, sharded=False)
        quantized = [self.variants.on_holdout(
            verdict, self.served(), lambda: self.evaluation(self.job.model, self.job.holdout_batches(), sharded=False)[:2],
            self.job.tokenizer(), self.leader) for verdict in p["quantized"]]
        if batches is None:
            self.substitute("read the holdout", "no holdout was given to the callback (holdout_dataset=)", {})
        self.holdout_eval = (loss, acc, n)
        if self.leader:
            self.write_card(p["quantized"])
        return {"HoldoutRead": {"loss": nan0(loss), "accuracy": nan0(acc), "samples": n, "quantized": quantized}}

    def write_card(self, verdicts: list[dict[str, Any]]) -> None:
        """``final/model-card.json`` (``contrai.card``): the exported model, and each quantized
        variant refine made (its file when kept; its bytes as counted when refused), with its GGUF
        file and llama.cpp's latency on the same batch when one was written."""
        model = self.served()
        batch = next(iter(self.job.eval_batches()))
        with evaluating(model):
            latency = latency_ms(lambda: self.job.logits(self.job.model, batch))
        loss, acc, _ = self.holdout_eval
        timed = f"latency on {first_device(model).type}"
        variants = [Variant(dtype_name(model), "final", *self.exported,
                            disk_bytes(self.run_dir / "final"), nan0(self.final_val[1]), nan0(acc), nan0(loss),
                            latency, "; ".join(x for x in (self.export_note, timed) if x))]
        # The quantized variants hold the exported model's shape (cut in place): its figures.
        for verdict in verdicts:
            variants += self.variants.card_lines(verdict, self.exported, token_rows(batch))
        self.card = card(model, class_names(model, self.classes), self.pruned_share(), bool(self.recomputing),
                         batch_size(batch) or 0, variants)
        self.writer.write("model_card", words_json(self.card))

    def finish(self, summary: dict[str, Any]) -> None:
        """``final/eval.json``, written last: the run is over; its figures and the card's into the
        job's trackers' summaries."""
        self.masks.apply(unwrap(self.job.model))
        self.finished = summary
        if not self.leader:
            return
        self.writer.sync()
        loss, acc, n = self.holdout_eval
        ev = {"step": summary["step"], "classes": class_names(unwrap(self.job.model), self.classes),
              "holdout_samples": n, "holdout_loss": loss, "holdout_accuracy": nan0(acc),
              "val_loss": self.final_val[0], "val_accuracy": nan0(self.final_val[1]),
              "best": summary["best"], "holdout_reads": 1, "main_end": summary["main_end"],
              "planned_steps": summary["planned_steps"], "sparsity": self.pruned_share(),
              "int8": summary["int8"], "student": None}
        if summary.get("int4") is not None:
            ev["int4"] = summary["int4"]
        self.writer.write("eval", words_json(ev))
        self.trackers.summary(*figures(ev, self.card, self.phase, self.run_dir / "decisions.jsonl"))


# The run directories this process holds, by path: one writer per directory is a rule between
# processes; a job run again in the same process (a notebook, a test) takes over its own lock.
HELD: dict[Path, _core.RunLock] = {}


def single_samples(batch: Any) -> Iterator[Any]:
    """Each sample of a batch as a batch of one: every tensor with the batch's first dimension
    sliced, dicts, lists and tuples rebuilt around them, anything else as it is."""
    def size(x: Any) -> int | None:
        if isinstance(x, torch.Tensor):
            return x.shape[0] if x.dim() > 0 else None
        items = x.values() if isinstance(x, Mapping) else x if isinstance(x, (list, tuple)) else ()
        return next((s for s in map(size, items) if s is not None), None)

    def take(x: Any, i: int) -> Any:
        if isinstance(x, torch.Tensor):
            return x[i:i + 1] if x.dim() > 0 else x
        if isinstance(x, Mapping):
            return {k: take(v, i) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(take(v, i) for v in x) if type(x) in (list, tuple) else type(x)(*(take(v, i) for v in x))
        return x

    for i in range(size(batch) or 0):
        yield take(batch, i)


def spread_batches(loader: Iterable[Any], samples: int | None) -> Iterable[Any]:
    """Batches of ``loader`` holding about ``samples`` samples, evenly spread over it (a fixed
    subsample: the same batches at every call); all of it when ``samples`` is None or not fewer
    than it holds, or when its length or batch size is unknown. A loader built on a batch
    sampler (accelerate's, in a Trainer) has its batch size there."""
    size = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    try:
        count = len(loader)  # type: ignore[arg-type]
    except TypeError:
        return loader
    if samples is None or not size or count == 0:
        return loader
    keep = max(1, -(-samples // size))
    if keep >= count:
        return loader
    wanted = {i * count // keep for i in range(keep)}
    return [b for i, b in enumerate(loader) if i in wanted]


def hold(run_dir: Path) -> _core.RunLock:
    """The run directory's lock (``contrai train``'s, an OS lock): this process's own if it holds
    it already, else taken; ``OSError`` naming the process that holds it."""
    key = run_dir.resolve()
    if key not in HELD:
        HELD[key] = _core.RunLock(run_dir)
    return HELD[key]


def resume_masks(record: dict[str, Any]) -> Masks:
    """The masks a resumed run's checkpoint holds (its ``masks.pt`` beside the record)."""
    if "masks_keep" in record:
        m = Masks()
        m.keep = dict(record["masks_keep"])
        return m
    path = record.get("masks_file")
    return Masks.load(path) if path and os.path.exists(path) else Masks()




Hook = Callable[[], None]
