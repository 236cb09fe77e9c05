"""The conductor's decisions where the job already logs: the tracker runs a Hugging Face
``Trainer``'s ``report_to`` or Lightning's loggers opened (W&B, MLflow, TensorBoard, Trackio) get
the phase as a scalar, each decision as a marker at its step and a table or text row, and the final
card's figures in the run's summary. No tracker run is opened here, and none is needed: with none
open a sink does nothing, and a tracker that fails is warned of once and left out — never the job.

===============  ===========================================  =============================================
tracker          where                                        what it holds
===============  ===========================================  =============================================
W&B              ``wandb.run`` (``WandbCallback`` /           ``contrai/phase``, ``contrai/decision/<kind>``,
                 ``WandbLogger``), rows against the job's     ``contrai/step`` in history with the job's step
                 step key (``train/global_step`` /            key; ``contrai/decisions`` an incremental
                 ``trainer/global_step``)                     table; figures in ``run.summary``
MLflow           the active run (``MLflowCallback``) or the   the same scalars as metrics at the job's step;
                 logger's (``MLFlowLogger``: its client and   ``contrai/decisions.jsonl`` an artifact; figures
                 ``run_id``)                                  as metrics, words as tags
TensorBoard      ``TensorBoardCallback.tb_writer`` /          the same scalars; ``contrai/decisions`` text
                 ``TensorBoardLogger.experiment``             (markdown) at the step; figures as scalars and
                                                              ``contrai/summary`` text
Trackio          the current run (``TrackioCallback``)        the same scalars with ``train/global_step``; a
                                                              one-row ``contrai/decisions`` table a decision;
                                                              figures in one last row
===============  ===========================================  =============================================

The step is the job's own (the Trainer's ``global_step``): what its charts are drawn against,
so a rollback shows where the loss went wrong. The lifecycle's step, which counts validate's check
and goes back with a rollback, is ``contrai/step`` and each row's ``step``.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from contrai.rows import words_json

# The phase as a scalar: the conductor's phases (contrai_recipe::Phase, protocol.Phase) in their order.
PHASES: dict[str, int] = {"validate": 0, "main": 1, "diagnose": 2, "contract": 3, "refine": 4}
PHASE = "contrai/phase"
# A decision's marker is ``MARK + kind`` (1 at its step); ``contrai/step`` the lifecycle's step.
MARK = "contrai/decision/"
STEP = "contrai/step"
DECISIONS = "contrai/decisions"
# A decision's row, in every tracker that holds rows.
COLUMNS = ["trainer_step", "step", "phase", "kind", "reason", "evidence"]
Row = dict[str, Any]


class Sink(Protocol):
    """One tracker's run, as Contrai writes into it."""

    name: str

    def log(self, step: int, scalars: Mapping[str, float], row: Row | None) -> None:
        """Scalars at the job's ``step``, and a decision's row with them when there is one."""

    def summary(self, step: int, figures: Mapping[str, float], words: Mapping[str, str]) -> None:
        """The final card's figures (numbers) and words (the final phase, ...) in the run's summary."""


class Trackers:
    """Every tracker sink the job has, found at the first write (the framework's own tracker
    callbacks set up as training begins); a sink that raises is warned of once and dropped."""

    def __init__(self, find: Callable[[], list[Sink]], step: Callable[[], int]) -> None:
        self.find = find
        self.step = step
        self.sinks: list[Sink] | None = None
        self.last: str | None = None

    def phase(self, phase: str) -> None:
        """The phase as a scalar, at the step it changes (``SetPhase``; diagnose has none: its decisions)."""
        if phase != self.last and phase in PHASES:
            self.last = phase
            step = self.step()
            self.each(lambda s: s.log(step, {PHASE: float(PHASES[phase])}, None))

    def decision(self, decision: Mapping[str, Any]) -> None:
        """A decision: its phase when later than the last (a decision may close the phase before),
        its marker and the lifecycle's step as scalars, and its row."""
        if PHASES.get(decision["phase"], -1) > PHASES.get(self.last or "", -1):
            self.phase(decision["phase"])
        step = self.step()
        scalars = {MARK + decision["kind"]: 1.0, STEP: float(decision["step"])}
        self.each(lambda s: s.log(step, scalars, row(step, decision)))

    def summary(self, figures: Mapping[str, float], words: Mapping[str, str]) -> None:
        """The run's final figures, into each run's summary."""
        step = self.step()
        self.each(lambda s: s.summary(step, figures, words))

    def each(self, write: Callable[[Sink], None]) -> None:
        """``write`` on every sink; one that raises is left out from here on, with a warning."""
        if self.sinks is None:
            self.sinks = found(self.find)
        for sink in list(self.sinks):
            try:
                write(sink)
            except Exception as e:
                self.sinks.remove(sink)
                warnings.warn(f"contrai: {sink.name} failed ({type(e).__name__}: {e}); the lifecycle's decisions go "
                              f"on to the run directory and the other trackers, not to {sink.name}", RuntimeWarning,
                              stacklevel=2)


def found(find: Callable[[], list[Sink]]) -> list[Sink]:
    """The sinks ``find`` names; none, with a warning, when looking fails."""
    try:
        return find()
    except Exception as e:
        warnings.warn(f"contrai: the job's trackers could not be found ({type(e).__name__}: {e}); the lifecycle's "
                      "decisions go to the run directory only", RuntimeWarning, stacklevel=3)
        return []


def row(step: int, decision: Mapping[str, Any]) -> Row:
    """A decision's row: the job's step, the lifecycle's, phase, kind, reason, evidence as JSON."""
    return {"trainer_step": step, "step": decision["step"], "phase": decision["phase"], "kind": decision["kind"],
            "reason": decision["reason"], "evidence": words_json(decision.get("evidence"))}


def markdown(r: Row) -> str:
    """A row as the text TensorBoard shows."""
    return (f"**{r['kind']}** ({r['phase']}, lifecycle step {r['step']}, trainer step {r['trainer_step']}): "
            f"{r['reason']}\n\n    {r['evidence']}")


def summary_markdown(figures: Mapping[str, float], words: Mapping[str, str]) -> str:
    """The figures and words as a two-column markdown table."""
    lines = ["| figure | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in {**words, **figures}.items()]
    return "\n".join(lines)


# ---- the sinks ---------------------------------------------------------------------------------


class Wandb:
    """The W&B run the job has open (``wandb.run``), its rows against the job's step key."""

    name = "W&B"

    def __init__(self, step_key: str) -> None:
        self.step_key = step_key
        self.table: Any = None

    def log(self, step: int, scalars: Mapping[str, float], r: Row | None) -> None:
        import wandb

        run = wandb.run
        if run is None:
            return
        values: dict[str, Any] = {**scalars, self.step_key: step}
        if r is not None:
            if self.table is None:
                columns: list[str | int] = list(COLUMNS)
                self.table = wandb.Table(columns=columns, log_mode="INCREMENTAL")
            self.table.add_data(*(r[c] for c in COLUMNS))
            values[DECISIONS] = self.table
        run.log(values)

    def summary(self, step: int, figures: Mapping[str, float], words: Mapping[str, str]) -> None:
        import wandb

        if wandb.run is not None:
            wandb.run.summary.update({**figures, **words})


class Mlflow:
    """An MLflow run: ``run()`` gives its client and id, or ``None`` when none is open."""

    name = "MLflow"

    def __init__(self, run: Callable[[], tuple[Any, str] | None]) -> None:
        self.run = run
        self.rows: list[str] = []

    def log(self, step: int, scalars: Mapping[str, float], r: Row | None) -> None:
        opened = self.run()
        if opened is None:
            return
        client, run_id = opened
        client.log_batch(run_id, metrics=metrics(scalars, step))
        if r is not None:
            self.rows.append(json.dumps(r))
            client.log_text(run_id, "\n".join(self.rows) + "\n", f"{DECISIONS}.jsonl")

    def summary(self, step: int, figures: Mapping[str, float], words: Mapping[str, str]) -> None:
        from mlflow.entities import RunTag

        opened = self.run()
        if opened is not None:
            client, run_id = opened
            client.log_batch(run_id, metrics=metrics(figures, step), tags=[RunTag(k, v) for k, v in words.items()])


def metrics(values: Mapping[str, float], step: int) -> list[Any]:
    """MLflow's metric entities of ``values`` at ``step``."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(k, v, now, step) for k, v in values.items()]


def active_mlflow() -> tuple[Any, str] | None:
    """The MLflow run the process has active (what ``MLflowCallback`` logs to), never one started."""
    import mlflow

    active = mlflow.active_run()
    return None if active is None else (mlflow.MlflowClient(), active.info.run_id)


class TensorBoard:
    """A TensorBoard ``SummaryWriter``: ``writer()`` gives it, or ``None`` once it is closed."""

    name = "TensorBoard"

    def __init__(self, writer: Callable[[], Any]) -> None:
        self.writer = writer

    def log(self, step: int, scalars: Mapping[str, float], r: Row | None) -> None:
        w = self.writer()
        if w is None:
            return
        for k, v in scalars.items():
            w.add_scalar(k, v, step)
        if r is not None:
            w.add_text(DECISIONS, markdown(r), step)
        w.flush()

    def summary(self, step: int, figures: Mapping[str, float], words: Mapping[str, str]) -> None:
        w = self.writer()
        if w is None:
            return
        for k, v in figures.items():
            w.add_scalar(k, v, step)
        w.add_text("contrai/summary", summary_markdown(figures, words), step)
        w.flush()


class Trackio:
    """The current Trackio run (what ``TrackioCallback`` logs to), rows with the job's step key
    (Trackio's own step counts ``log`` calls, as the callback leaves it)."""

    name = "Trackio"

    def __init__(self, step_key: str) -> None:
        self.step_key = step_key

    def log(self, step: int, scalars: Mapping[str, float], r: Row | None) -> None:
        import trackio

        run = trackio.context_vars.current_run.get()
        if run is None:
            return
        values: dict[str, Any] = {**scalars, self.step_key: step}
        if r is not None:
            values[DECISIONS] = trackio.Table(columns=COLUMNS, data=[[r[c] for c in COLUMNS]])
        run.log(values)

    def summary(self, step: int, figures: Mapping[str, float], words: Mapping[str, str]) -> None:
        import trackio

        run = trackio.context_vars.current_run.get()
        if run is not None:
            run.log({**figures, "contrai/summary": trackio.Markdown(summary_markdown(figures, words)),
                     self.step_key: step})


# ---- the job's trackers ------------------------------------------------------------------------


def named(obj: Any, *names: str) -> bool:
    """Whether ``obj``'s class or one it derives from has one of ``names`` (no framework import)."""
    return any(c.__name__ in names for c in type(obj).__mro__)


def hf_sinks(trainer: Any) -> list[Sink]:
    """The trackers a Hugging Face ``Trainer`` reports to (``report_to``: its callbacks)."""
    sinks: dict[str, Sink] = {}
    for cb in trainer.callback_handler.callbacks:
        if named(cb, "WandbCallback"):
            sinks.setdefault("wandb", Wandb("train/global_step"))
        elif named(cb, "MLflowCallback"):
            sinks.setdefault("mlflow", Mlflow(active_mlflow))
        elif named(cb, "TensorBoardCallback"):
            sinks.setdefault("tensorboard", TensorBoard(partial(getattr, cb, "tb_writer")))
        elif named(cb, "TrackioCallback"):
            sinks.setdefault("trackio", Trackio("train/global_step"))
    return list(sinks.values())


def lightning_sinks(trainer: Any) -> list[Sink]:
    """The trackers a Lightning ``Trainer`` logs to (its loggers; Lightning has none for Trackio)."""
    sinks: dict[str, Sink] = {}
    for logger in trainer.loggers:
        if named(logger, "WandbLogger"):
            sinks.setdefault("wandb", Wandb("trainer/global_step"))
        elif named(logger, "MLFlowLogger"):
            sinks.setdefault("mlflow", Mlflow(partial(logger_run, logger)))
        elif named(logger, "TensorBoardLogger"):
            sinks.setdefault("tensorboard", TensorBoard(partial(getattr, logger, "experiment")))
    return list(sinks.values())


def logger_run(logger: Any) -> tuple[Any, str] | None:
    """An ``MLFlowLogger``'s client and run (the one Lightning logs the job to)."""
    run_id = logger.run_id
    return None if run_id is None else (logger.experiment, run_id)


# ---- the final figures -------------------------------------------------------------------------


def figures(evaluation: Mapping[str, Any], card: Mapping[str, Any] | None, phase: str,
            decisions: Path) -> tuple[dict[str, float], dict[str, str]]:
    """The run's final figures (``final/eval.json``'s, the model card's, the decisions counted)
    and its words, each key under ``contrai/``; non-finite figures left out."""
    nums = {**eval_figures(evaluation), **counted(decisions)}
    words = {"final_phase": phase}
    if evaluation.get("main_end"):
        nums["main_end_step"], words["main_end"] = evaluation["main_end"]
    if card is not None:
        nums |= card_figures(card)
        words["architecture"] = card["architecture"]
    return ({f"contrai/{k}": float(v) for k, v in nums.items() if finite(v)},
            {f"contrai/{k}": str(v) for k, v in words.items()})


def eval_figures(evaluation: Mapping[str, Any]) -> dict[str, Any]:
    """``final/eval.json``'s numbers: steps, holdout and validation, best, sparsity, int8 / int4."""
    nums = {k: evaluation.get(k) for k in (
        "step", "planned_steps", "holdout_samples", "holdout_loss", "holdout_accuracy", "val_loss", "val_accuracy")}
    if evaluation.get("best"):
        nums["best_step"], nums["best_val_loss"] = evaluation["best"]
    nums |= {f"sparsity/{m}": s for m, s in (evaluation.get("sparsity") or {}).items()}
    for q in ("int8", "int4"):
        if isinstance(quant := evaluation.get(q), dict):
            nums |= {f"{q}/{k}": v for k, v in quant.items()} | {f"{q}/kept": float(quant["kept"])}
    return nums


def card_figures(card: Mapping[str, Any]) -> dict[str, Any]:
    """The model card's numbers: its parameters, and each variant's size, zeros, accuracy, latency."""
    nums: dict[str, Any] = {"parameters": card["parameters"]}
    for v in card["variants"]:
        nums |= {f"variants/{v['name']}/{k}": v[k] for k in (
            "parameters", "zero_weights", "bytes", "val_accuracy", "holdout_accuracy", "holdout_loss", "latency_ms")}
    return nums


def counted(decisions: Path) -> dict[str, int]:
    """The run's decisions (``decisions.jsonl``, a resumed run's included), its rollbacks, LR cuts."""
    kinds = [json.loads(line)["kind"] for line in decisions.read_text().splitlines() if line.strip()]
    return {"decision_count": len(kinds), "rollbacks": sum(k.startswith("rollback_") for k in kinds),
            "lr_cuts": sum(k.startswith("lr_cut_") for k in kinds)}


def finite(v: Any) -> bool:
    """Whether ``v`` is a finite number (not a bool, not ``None``)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
