"""The conductor, as Python sees it: observations in, turns out, typed by :mod:`contrai.protocol`
(generated from the Rust types).

A turn is ``{"actions": [...], "request": ...}``: carry out the actions in order, then answer the
request with the observation it asks for. Actions and requests are the serde forms of
``contrai_lifecycle::protocol`` — a unit variant is a string (``"RoundTrip"``), the others a
one-key dict (``{"Train": {"step": 3, "phase": "main", "lr": 0.0005}}``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from contrai import _core
from contrai.protocol import Observation, RunPlan, State, Task, Tuning, Turn


@dataclass
class RunInfo:
    """What the conductor knows of the run before it starts."""

    train_samples: int
    classes: int
    weights: list[str] = field(default_factory=list)
    heads: int | None = None
    # The job's own optimizer-step budget, when the recipe leaves main.steps to it.
    job_steps: int | None = None
    # Whether the job recomputes activations (gradient checkpointing): the plan says what runs.
    gradient_checkpointing: bool | None = None
    # Every weight trains, or adapters on a frozen base: validate holds an adapter job to
    # what adapters reach.
    tuning: Tuning | None = None
    # What the model predicts: a language model's quantized variants are judged by perplexity.
    task: Task = "classification"


def kind(item: Any) -> tuple[str, Any]:
    """An action's or request's variant name and payload."""
    if isinstance(item, str):
        return item, None
    ((name, payload),) = item.items()
    return name, payload


class Conductor:
    """The lifecycle of one run (every rule lives in the Rust core)."""

    def __init__(self, recipe_toml: str, info: RunInfo, recipe_path: str = "recipe.toml",
                 state: State | None = None, history: str = "") -> None:
        info_json = json.dumps(asdict(info))
        if state is None:
            self._c = _core.Conductor(recipe_toml, recipe_path, info_json)
        else:
            self._c = _core.Conductor.resume(recipe_toml, recipe_path, info_json, json.dumps(state), history)

    def begin(self) -> Turn:
        """The first turn."""
        return self._c.begin()

    def observe(self, observation: Observation) -> Turn:
        """The next turn for an observation (a variant name with its fields)."""
        return self._c.observe(observation)

    def state(self) -> State:
        """The conductor's state (what a checkpoint saves)."""
        return self._c.state()

    def plan(self) -> RunPlan:
        """``plan.json`` as the run now stands."""
        return self._c.plan()

    def phase_steps(self) -> dict[str, int]:
        """Steps each phase plans."""
        return self._c.phase_steps()

    def recipe_toml(self) -> str:
        """The recipe in force, resolved."""
        return self._c.recipe_toml()
