"""What the Hugging Face and Lightning callbacks do that no framework owns: the recipe checked and
laid on the job's step budget, the pre-flight gate, the engine made and started, a failure raised,
a stop signal the ranks agreed on, and the job's end. Each callback subclasses
:class:`LifecycleCallback` beside its framework's callback class and keeps only its framework's
events, checkpoints and messages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from contrai.engine import Engine
from contrai.engine.batches import unwatch, watch
from contrai.engine.job import Job, job_steps, planned_steps
from contrai.preempt import Preemption
from contrai.preflight import Mode, gate, under_recipe


class LifecycleCallback:
    """The framework-free half of a ``ContraiCallback``: its subclass names the hook that starts
    the engine (``START_HOOK``) and how its job's step limit is set (``MAX_STEPS``), for messages."""

    START_HOOK = "on_train_begin"
    MAX_STEPS = "max_steps={}"

    def __init__(self, recipe: str | os.PathLike[str], run_dir: str | os.PathLike[str], *, holdout_dataset: Any,
                 classes: int | None, turn_log: str | os.PathLike[str] | None, preflight: Mode) -> None:
        from contrai._core import recipe_check

        self.recipe_path = os.fspath(recipe)
        self.recipe_toml = Path(recipe).read_text()
        recipe_check(self.recipe_toml, self.recipe_path)  # a ValueError naming key, line, nearest key
        self.run_dir = Path(run_dir)
        self.holdout = holdout_dataset
        self.classes = classes
        self.turn_log = turn_log
        self.preflight = preflight
        self.planned = 0  # optimizer steps the recipe plans (set when training starts)
        self.job_steps: int | None = None  # the Trainer's budget, when the recipe leaves main.steps to it
        self.engine: Engine | None = None
        self._preemption = Preemption()

    def _plan(self, budget: int | None, limit: int | None) -> None:
        """The recipe's optimizer steps laid on the job's ``budget`` (main's, where the recipe
        leaves them to the job); a step ``limit`` below them refused, saying what to set."""
        self.job_steps = job_steps(self.recipe_toml, budget)
        total = self.planned = planned_steps(self.recipe_toml, self.recipe_path, self.job_steps)
        if limit is not None and limit < total:
            raise ValueError(
                f"the recipe plans {total} optimizer steps (main, contract and refine) but the Trainer stops at "
                f"{limit}: set {self.MAX_STEPS.format(total)} — the lifecycle stops the Trainer itself when it ends")

    def _gate(self, facts: Any, speak: bool) -> None:
        """The pre-flight check of the job's ``facts`` under the recipe (unless it is off)."""
        if self.preflight == "off":
            return
        gate(under_recipe(facts, self.recipe_toml, self.recipe_path, self.holdout is not None), self.preflight,
             speak=speak)

    def _new_engine(self, job: Job, classes: int) -> Engine:
        """The engine of this run on ``job`` (started by the caller once its framework is ready)."""
        self.engine = Engine(job, self.run_dir, self.recipe_toml, self.recipe_path, classes, turn_log=self.turn_log,
                             job_steps=self.job_steps)
        return self.engine

    def _going(self) -> None:
        """Training starts: what the train set serves from here is what the Trainer trains, and
        stop signals are taken."""
        watch(self._running().job.train_dataset())
        self._preemption.install()

    def _running(self) -> Engine:
        """The engine of the run under way."""
        if self.engine is None:
            raise RuntimeError(f"ContraiCallback: the Trainer stepped before {self.START_HOOK}")
        return self.engine

    def _raise_if_failed(self) -> Engine:
        """A run the engine stopped ends the job, saying why."""
        e = self._running()
        if e.failed is not None:
            self._end()
            raise RuntimeError(f"contrai: the run stopped: {e.failed}")
        return e

    def _agreed_stop(self) -> bool:
        """Whether any rank got a stop signal (the ranks agree at every step); if so the engine
        takes this step's record and the caller saves the framework's checkpoint."""
        e = self._running()
        if e.finished is not None or e.stopped_by is not None:
            return False
        signum = self._preemption.agreed(e.job.all_reduce)
        if signum is None:
            return False
        e.stop_for(signum)
        return True

    def _finish(self, global_step: int) -> Engine | None:
        """The Trainer's loop is over: a run it cut short is recorded, and every rank leaves the
        job together (a rank gone while rank 0 still wrote the model card made rank 0's process
        abort at exit: gloo, SIGABRT after a finished run, 1 in 4 jobs)."""
        e = self.engine
        if e is None:
            return None
        e.stopped_early(global_step, self.planned, self.MAX_STEPS)
        e.job.barrier()
        self._end()
        return e

    def _end(self) -> None:
        """The job is over: the run directory let go, the signal handlers put back."""
        self._preemption.restore()
        if self.engine is not None:
            unwatch(self.engine.job.train_dataset())
            self.engine.release()
