"""Contrai's lifecycle inside a Hugging Face ``Trainer``: one callback, attached to its Trainer.

>>> trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val)
>>> ContraiCallback("recipe.toml", run_dir="runs/x").attach(trainer)
>>> trainer.train()

``attach`` hands the callback its Trainer and registers it there (a callback already passed in
``Trainer(callbacks=[...])`` is not added twice), and wraps a map-style train dataset in
:class:`DroppableDataset` so that contraction can drop its noisiest rows. A callback never
attached still finds the Trainer that calls it, with a ``FutureWarning``: that way goes in a
later release.

The recipe governs the run: its phases, its LR schedule (the Trainer's scheduler is overridden
step by step), its evaluation and checkpoint cadence. Every step's loss and gradient norm and
every evaluation go to the conductor; its decisions are carried out in the running job, and the
run directory is written as the job goes (``contrai doctor`` / ``contrai report`` read it).

======================================  ==========================================  ==============================================
Trainer event                           sent to the conductor                       what the engine does
======================================  ==========================================  ==============================================
``attach(trainer)``                     —                                           binds the Trainer, registers the callback,
                                                                                    warns when transformers is outside ``TESTED``
``on_train_begin``                      the run's facts (samples, classes, weight   refuses what the recipe cannot run with (no
                                        names, heads) to a fresh conductor, or the  eval set, too few ``max_steps``, pruning under
                                        state in ``checkpoint-N/contrai.json`` on   FSDP / ZeRO-3) and, by the pre-flight check,
                                        resume; then the answer to each request     what would break the job (``preflight=``);
                                        until it asks to train:                     taps loss and gradient norm; holds the
                                        ``PipelineChecked`` (validate),             scheduler to the conductor's LR; carries out
                                        ``RoundTripped``, ...                       the turns (validate's one-batch check, the
                                                                                    checkpoint round trip, ...); sets the first
                                                                                    step's LR
each micro-batch's ``training_step``    —                                           adds its loss, rows and tokens to the step's
gradient clipping                       —                                           keeps the norm before clipping
``on_step_end``                         ``Stepped`` (loss, mean over ranks; pre-    applies the masks; writes the step's metrics
                                        clip grad norm; LR); then the answer to     row; carries out the turn's actions (record,
                                        each request of the turns that follow:      replan, phase, batch, dropout, drop samples,
                                        ``Evaluated``, ``Pruned``, ``Sensitivity``, checkpoint) and requests (evaluate, prune,
                                        ``JointLoss``, ``SampleLosses``,            measure, restore, export, quantize, read the
                                        ``Restored``, ``Exported``, ``Declined``    holdout, write ``eval.json``); sets the next
                                        (distil), ``Quantized``, ``HoldoutRead``    step's LR; asks the Trainer to save at a
                                                                                    lifecycle checkpoint and to stop at the end;
                                                                                    raises ``max_steps`` by the steps lost
``on_save``                             —                                           ``contrai.json`` and ``contrai-masks.pt`` in the
                                                                                    Trainer's ``checkpoint-N`` (for its resume)
``on_train_end``                        —                                           if the lifecycle did not finish: records an
                                                                                    ``engine_substitute`` naming the ``max_steps``
                                                                                    to set
======================================  ==========================================  ==============================================

Everything this module needs of the Trainer beyond its public API is in ``contrai.integrations._compat.hf``.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from contrai import _core
from contrai.data import DroppableDataset
from contrai.engine.adapters import merge
from contrai.engine.batches import StepBatches, watch
from contrai.engine.checkpoints import Checkpoints, load_weights, newest_verified
from contrai.engine.job import Job, OriginalRows, refuse_sharded_pruning
from contrai.engine.lora import train_also, trained_past_merge
from contrai.engine.model import unwrap
from contrai.engine.persist import KEEP_LAST
from contrai.integrations._compat import hf as compat
from contrai.integrations.callback import LifecycleCallback
from contrai.integrations.trackers import Sink, hf_sinks
from contrai.preempt import stopped
from contrai.preflight import Mode, facts_hf, refuse_nothing_to_train
from contrai.resume import Order, Resumed, fingerprint, gathered, replayed, rng_states


class HfJob(Job):
    """A running ``Trainer`` as the engine sees it."""

    def __init__(self, trainer: Trainer, train_dataloader: DataLoader[Any], holdout: Any) -> None:
        self.trainer = trainer
        self.loader = train_dataloader
        self.holdout = holdout
        args = trainer.args
        self.rank = args.process_index
        self.world = args.world_size
        self.per_device_batch = args.per_device_train_batch_size
        self.effective_batch = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps

    @property
    def model(self) -> torch.nn.Module:  # type: ignore[override]
        model = self.trainer.model
        if model is None:
            raise RuntimeError("the Trainer has no model")
        return model

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:  # type: ignore[override]
        return self.trainer.optimizer

    def schedulers(self) -> list[Any]:
        return [s for s in (self.trainer.lr_scheduler,) if s is not None]

    def logits(self, model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        return model(**inputs).logits, batch["labels"]

    def train_batch(self) -> Any:
        return next(iter(self.loader))

    def eval_batches(self) -> Any:
        return self.trainer.get_eval_dataloader()

    def in_order(self, dataset: Any) -> DataLoader[Any]:
        """``dataset`` in row order, in evaluation batches collated as training's are."""
        bs = self.trainer.args.per_device_eval_batch_size
        return DataLoader(dataset, batch_size=bs, shuffle=False, collate_fn=self.loader.collate_fn)

    def train_rows(self) -> Iterator[tuple[list[int], Any]]:
        start = 0
        for b in self.in_order(OriginalRows(self.loader.dataset)):
            b = compat.prepare_inputs(self.trainer, b)
            n = len(b["labels"])
            yield list(range(start, start + n)), b
            start += n

    def holdout_batches(self) -> Any:
        if self.holdout is None:
            return None
        return (compat.prepare_inputs(self.trainer, b) for b in self.in_order(self.holdout))

    def train_dataset(self) -> Any:
        return self.loader.dataset

    def tokenizer(self) -> Any:
        return getattr(self.trainer, "processing_class", None)

    def trackers(self) -> list[Sink]:
        return hf_sinks(self.trainer)

    def logged_step(self) -> int:
        return self.trainer.state.global_step


@dataclass
class _Step:
    """What the Trainer showed of the optimizer step under way: its loss summed over its
    micro-batches, its gradient norm before clipping, and its batches' rows and tokens."""

    loss: float = 0.0
    seen: bool = False
    grad_norm: float | None = None
    batches: StepBatches = field(default_factory=StepBatches)

    def add_loss(self, loss: torch.Tensor) -> None:
        self.loss += float(loss)
        self.seen = True

    def set_grad_norm(self, norm: float | None) -> None:
        self.grad_norm = norm

    def take(self) -> tuple[float | None, float | None]:
        """The step's loss (``None`` when no micro-batch ran) and gradient norm; cleared for the next."""
        out = (self.loss if self.seen else None, self.grad_norm)
        self.loss, self.seen, self.grad_norm = 0.0, False, None
        return out


class ContraiCallback(LifecycleCallback, TrainerCallback):
    """Runs Contrai's lifecycle in a Hugging Face ``Trainer``: build it, then :meth:`attach` it to
    the Trainer (``ContraiCallback("recipe.toml", run_dir="runs/x").attach(trainer)``).

    Args:
        recipe: the recipe file (TOML; ``contrai recipe init`` writes the default). Its phases,
            LR schedule, evaluation and checkpoint cadence govern the run.
        run_dir: the run directory to write.
        holdout_dataset: the holdout, evaluated once at the end, collated as training's batches
            are (raw rows under TRL's ``SFTTrainer`` are first prepared as its evaluation set is).
        classes: classes of the task (default: the model config's ``num_labels``).
        turn_log: under torch.distributed, a file each rank appends every turn it carried out to
            (to check that all ranks applied the same actions).
        preflight: the pre-flight check before step 1 (``contrai.preflight``; the schedule and
            checkpoint cadence judged are the recipe's): ``"stop"`` refuses a job with an error
            finding, naming each, and says the warnings; ``"warn"`` says them all and trains;
            ``"off"`` skips it.
    """

    START_HOOK = "on_train_begin"
    MAX_STEPS = "TrainingArguments(max_steps={})"

    def __init__(self, recipe: str | os.PathLike[str], run_dir: str | os.PathLike[str], *,
                 holdout_dataset: Any = None, classes: int | None = None,
                 turn_log: str | os.PathLike[str] | None = None, preflight: Mode = "stop") -> None:
        super().__init__(recipe, run_dir, holdout_dataset=holdout_dataset, classes=classes, turn_log=turn_log,
                         preflight=preflight)
        self.trainer: Trainer | None = None
        self._step = _Step()
        # This rank's sample order in the epoch under way; what a resume checks at its first step.
        self._order = Order()
        self._resumed: Resumed | None = None
        self._resumed_order: dict[str, Any] | None = None
        self._drops_at_epoch = 0

    # ---- setting up ---------------------------------------------------------------------------

    def attach(self, trainer: Trainer) -> ContraiCallback:
        """Binds the callback to ``trainer`` and registers it among its callbacks (once, whether or
        not it was passed in ``callbacks=``); a map-style train dataset becomes droppable
        (:func:`droppable`); returns the callback."""
        if self.trainer is not None and self.trainer is not trainer:
            raise ValueError("ContraiCallback is attached to another Trainer already: one callback runs one job")
        compat.check()
        refuse_nothing_to_train(trainer.model)
        self.trainer = trainer
        trainer.train_dataset = droppable(trainer.train_dataset)
        compat.register(trainer, self)
        compat.before_optimizer_load(trainer, self._merge_on_resume)
        return self

    def _merge_on_resume(self, checkpoint: Path) -> None:
        """A LoRA job resumed from a checkpoint written past main, before the Trainer loads its
        optimizer: the Trainer saved PEFT's adapters alone and an optimizer with the merged
        matrices' group, so the adapters are merged again, the merged matrices get their values
        at that step from the lifecycle's own checkpoint, and their group is added as the
        engine added it — then the Trainer's optimizer and scheduler load as saved."""
        path = checkpoint / "contrai.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        trainer = self.trainer
        if trainer is None or trainer.model is None or not record.get("merged"):
            return
        step = int(record["step"])
        try:
            ckpt = Checkpoints(self.run_dir / "checkpoints", KEEP_LAST).read({"Step": step})
        except Exception as e:
            raise RuntimeError(
                f"{checkpoint} was written after the LoRA adapters were merged, and the merged weights live in the "
                f"lifecycle's checkpoint of step {step} under {self.run_dir / 'checkpoints'}, which cannot be read "
                f"({e}): resume from a checkpoint whose lifecycle checkpoint is there") from e
        model = unwrap(trainer.model)
        names = trained_past_merge(model, self.recipe_toml, self.recipe_path)
        merge(model)
        load_weights(model, ckpt)
        train_also(model, trainer.optimizer, [s for s in (trainer.lr_scheduler,) if s is not None], names)
        print(f"[contrai] resume past the LoRA merge: adapters merged again, {len(names)} merged or pruned matrices "
              f"from the lifecycle's checkpoint of step {step}")

    def _bound_trainer(self) -> Trainer:
        """The attached Trainer; else the one calling this callback, found the deprecated way."""
        if self.trainer is not None:
            return self.trainer
        warnings.warn("ContraiCallback was not attached: call ContraiCallback(...).attach(trainer) after building "
                      "the Trainer (finding the Trainer from the call stack goes in a later release)",
                      FutureWarning, stacklevel=2)
        trainer = compat.find_trainer_on_stack()
        if trainer is None:
            raise RuntimeError("ContraiCallback has no Trainer: call ContraiCallback(...).attach(trainer)")
        self.attach(trainer)
        return trainer

    def _check(self, trainer: Trainer, max_steps: int) -> None:
        """What the Trainer must give the recipe, each refusal saying what to set."""
        if trainer.eval_dataset is None:
            raise ValueError("ContraiCallback needs an evaluation set: pass eval_dataset= to the Trainer "
                             "(the conductor evaluates at the recipe's cadence, run.eval_every)")
        if getattr(trainer.args, "load_best_model_at_end", False):
            raise ValueError("TrainingArguments(load_best_model_at_end=True) loads, after training, the checkpoint the "
                             "Trainer judged best by its own metric — undoing the contraction the lifecycle exported "
                             "and the variants it measured (the lifecycle rolls back to its own best when "
                             "generalisation worsens): set load_best_model_at_end=False")
        if compat.shards_parameters(trainer):
            refuse_sharded_pruning(self.recipe_toml, self.recipe_path, "FSDP or DeepSpeed ZeRO-3")
        self._plan(max_steps, max_steps)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: Any = None, train_dataloader: Any = None, lr_scheduler: Any = None,
                       **kw: Any) -> TrainerControl:
        trainer = self._bound_trainer()
        self._check(trainer, state.max_steps)
        self._gate(facts_hf(args, trainer.model, trainer), speak=args.process_index == 0)
        classes = self.classes or int(getattr(getattr(model, "config", None), "num_labels", 2))
        job = HfJob(trainer, train_dataloader, None if self.holdout is None else
                    compat.prepared_like_eval(trainer, self.holdout))
        engine = self._new_engine(job, classes)
        self._step = _Step()  # a fresh one: taps of an earlier train() keep feeding the old
        compat.tap_loss(trainer, self._step.add_loss, self._trained)
        compat.tap_grad_norm(trainer, self._step.set_grad_norm)
        compat.hold_lr(lr_scheduler, self._lr)
        self._limit_saves(args)
        record = self._resume_record(args, state)
        engine.start(record)
        if record is not None and engine.failed is None:
            self._certify(trainer, record)
        self._going()
        return self._after(control)

    def _certify(self, trainer: Trainer, record: dict[str, Any]) -> None:
        """Before the first resumed step: the epoch's order up to the checkpoint drawn again from
        the Trainer's loader and checked against the checkpoint's (a difference stops the job);
        what the first step must then see kept for it."""
        e = self._running()
        orders, rngs = record.get("order"), record.get("rng")
        if orders is None or rngs is None or len(orders) != e.job.world:
            return  # written before resumes were certified, or by another number of ranks
        mine = orders[e.job.rank]
        differs, nxt = replayed(compat.epoch_batches(trainer, mine["epoch"]), mine)
        if differs is not None:
            e.failed = f"resume: {differs}"
            return
        self._resumed_order = mine
        print(f"[contrai] resume certified before its first step: epoch {mine['epoch']}'s first {mine['count']} "
              f"batches drawn again match the stopped job's; the next step's LR is the checkpoint's")
        # At an epoch's start the loop draws from the generators before the first step, as the
        # stopped job did: only a mid-epoch resume meets them as they were saved.
        self._resumed = Resumed(rng=rngs[e.job.rank] if mine["count"] else None, next_batch=nxt)

    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kw: Any) -> None:
        epoch = int(state.epoch or 0)
        done, self._resumed_order = self._resumed_order, None
        if done is not None and done["epoch"] == epoch:
            self._order = Order(epoch, done["count"], done["chain"], done.get("changed", False))
        else:
            self._order.start(epoch)
        self._drops_at_epoch = self.engine.drops if self.engine is not None else 0
        if self.engine is not None:
            watch(self.engine.job.train_dataset())

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kw: Any) -> None:
        if self._resumed is not None:
            self._resumed.at_first_step()
            for note in self._resumed.notes:
                print(f"[contrai] resume: {note}")
            self._resumed.notes.clear()

    def _trained(self, inputs: Any) -> None:
        """A micro-batch about to be trained: into this rank's order; the first after a resume
        must be the one the checkpoint's order says."""
        fp = fingerprint(inputs)
        self._order.add(fp)
        self._step.batches.add(self._running().job.train_dataset(), inputs)
        if self._resumed is not None:
            differs = self._resumed.first_batch(fp)
            self._resumed = None
            if differs is not None:
                self._end()
                raise RuntimeError(f"contrai: the run stopped: resume: {differs}")

    def _limit_saves(self, args: TrainingArguments) -> None:
        """The Trainer saves at the lifecycle's checkpoints (``resume_from_checkpoint`` needs
        them); without ``save_total_limit`` it would keep every one — a full model and optimizer
        each. It keeps as many as the lifecycle does (said on the log)."""
        if args.save_total_limit is None and args.should_save:
            args.save_total_limit = KEEP_LAST
            print(f"[contrai] TrainingArguments.save_total_limit was unset: the Trainer's checkpoints the lifecycle "
                  f"asks for are kept {KEEP_LAST} at a time (set save_total_limit to keep more)")

    def _lr(self) -> float:
        """The LR the optimizer holds (the conductor's, set before each step)."""
        opt = self.trainer.optimizer if self.trainer is not None else None
        return float(opt.param_groups[0]["lr"]) if opt is not None else 0.0

    def _resume_record(self, args: TrainingArguments, state: TrainerState) -> dict[str, Any] | None:
        """The lifecycle's record in the checkpoint the Trainer resumed from (``None`` at step 0)."""
        if state.global_step == 0:
            return None
        ckpt = compat.checkpoint_dir(args, state.global_step)
        path = ckpt / "contrai.json"
        if not path.exists():
            raise ValueError(f"{ckpt} holds no contrai.json: it was not written under ContraiCallback, so the "
                             "lifecycle cannot resume from it")
        raw = json.loads(path.read_text())
        # The typed record checked (a damaged one refused naming its field), the resume's own
        # keys (each rank's order and generators) kept beside it.
        record: dict[str, Any] = {**raw, **_core.checkpoint_record(raw, str(path))}
        record["masks_file"] = str(ckpt / "contrai-masks.pt")
        return record

    # ---- every step ---------------------------------------------------------------------------

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kw: Any) -> TrainerControl:
        e = self._running()
        rows, length = self._step.batches.take(e.job.world, e.job.all_reduce)
        loss, norm = self._step.take()
        if loss is not None:
            loss = e.job.all_reduce([loss])[0] / e.job.world
        e.stepped(loss, norm, rows, length)
        if e.finished is None:
            # Steps that failed or rollbacks took back: the plan still fits (its epochs allowing:
            # else on_train_end says what to set).
            compat.extend_max_steps(state, control, self.planned + e.lost_steps)
        self._after(control)
        return self._stop_if_signalled(control)

    def _stop_if_signalled(self, control: TrainerControl) -> TrainerControl:
        """A stop signal any rank got (the ranks agree at every step): this step is saved — the
        Trainer's checkpoint with the lifecycle's record, sealed — and the job stops, exiting in
        ``on_train_end``."""
        if self._agreed_stop():
            control.should_save = True
            control.should_training_stop = True
        return control

    def _after(self, control: TrainerControl) -> TrainerControl:
        """Carries the engine's state to the Trainer: stop, save, the next step's LR."""
        e = self._raise_if_failed()
        if e.last_record is not None and e.last_record.get("step") == e.step:
            control.should_save = True
        if e.finished is not None:
            control.should_training_stop = True
        if self.trainer is not None and e.plan is not None:
            compat.show_lr(self.trainer.lr_scheduler, e.plan["lr"])
        return control

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any) -> None:
        """The lifecycle's record beside the Trainer's checkpoint (``resume_from_checkpoint``), then
        the whole checkpoint sealed (``SHA256SUMS``: :func:`last_checkpoint` verifies it) once every
        rank's files are in."""
        e = self.engine
        if e is None or e.last_record is None:
            return
        ckpt = compat.checkpoint_dir(args, state.global_step)
        # Every rank's order and generators, gathered on all (collective: every rank saves).
        self._order.changed |= e.drops != self._drops_at_epoch
        order, rng = gathered(self._order.record(), e.job.world), gathered(rng_states(), e.job.world)
        # A save of the user's own schedule between the lifecycle's checkpoints gets no record:
        # the lifecycle's state there was never written, so it cannot resume from it.
        if e.job.rank == 0 and ckpt.is_dir() and e.last_record.get("step") == e.step:
            e.masks.save(str(ckpt / "contrai-masks.pt"))
            (ckpt / "contrai.json").write_text(json.dumps({**(e.resume_record() or {}), "order": order, "rng": rng}))
        e.job.barrier()
        if args.should_save and ckpt.is_dir():
            _core.seal(ckpt)

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kw: Any) -> None:
        e = self._finish(state.global_step)
        if e is not None and e.stopped_by is not None:
            raise stopped(e.stopped_by, state.global_step, str(compat.checkpoint_dir(args, state.global_step)),
                          "the script resumes with trainer.train(resume_from_checkpoint="
                          f"contrai.integrations.hf.last_checkpoint({str(args.output_dir)!r}))")


def droppable(dataset: Any) -> Any:
    """A map-style dataset wrapped in :class:`DroppableDataset` (unless it is one), so that
    contraction can drop its noisiest rows; an iterable one (no ``len``, no index) as it is. The
    Trainer takes the wrapper's rows through its collator, unused columns removed there: TRL's
    ``SFTTrainer`` prepares only a ``datasets.Dataset``, so its user cannot wrap it beforehand."""
    if dataset is None or isinstance(dataset, (DroppableDataset, torch.utils.data.IterableDataset)):
        return dataset
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        return dataset
    return DroppableDataset(dataset)


def last_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest ``checkpoint-N`` under ``output_dir`` whose files match their sums (written
    under :class:`ContraiCallback`), for ``trainer.train(resume_from_checkpoint=...)``; ``None``
    when there is none — so one script serves the first run and every requeue. A newer checkpoint
    that fails its sums (a kill mid-save) is passed over, said on the log."""
    found = [(int(p.name.rsplit("-", 1)[1]), p) for p in Path(output_dir).glob("checkpoint-*")
             if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()]
    newest = newest_verified(found)
    return None if newest is None else str(newest)


__all__ = ["ContraiCallback", "last_checkpoint"]
