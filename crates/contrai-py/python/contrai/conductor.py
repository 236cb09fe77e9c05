"""The conductor, as Python sees it: observations in (dicts), turns out (dicts).

A turn is ``{"actions": [...], "request": ...}``: carry out the actions in order, then answer the
request with the observation it asks for. Actions and requests are the serde forms of
``contrai_lifecycle::protocol`` — a unit variant is a string (``"RoundTrip"``), the others a
one-key dict (``{"Train": {"step": 3, "phase": "main", "lr": 0.0005}}``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from . import _core


@dataclass
class RunInfo:
    """What the conductor knows of the run before it starts."""

    train_samples: int
    classes: int
    weights: list[str] = field(default_factory=list)
    heads: int | None = None


def kind(item: Any) -> tuple[str, Any]:
    """An action's or request's variant name and payload."""
    if isinstance(item, str):
        return item, None
    ((name, payload),) = item.items()
    return name, payload


class Conductor:
    """The lifecycle of one run (every rule lives in the Rust core)."""

    def __init__(self, recipe_toml: str, info: RunInfo, recipe_path: str = "recipe.toml",
                 state: dict[str, Any] | None = None, history: str = "") -> None:
        info_json = json.dumps(asdict(info))
        if state is None:
            self._c = _core.Conductor(recipe_toml, recipe_path, info_json)
        else:
            self._c = _core.Conductor.resume(recipe_toml, recipe_path, info_json, json.dumps(state), history)

    def begin(self) -> dict[str, Any]:
        """The first turn."""
        return json.loads(self._c.begin())

    def observe(self, observation: Any) -> dict[str, Any]:
        """The next turn for an observation (a variant name with its fields)."""
        return json.loads(self._c.observe(observation))

    def state(self) -> dict[str, Any]:
        """The conductor's state (what a checkpoint saves)."""
        return json.loads(self._c.state())

    def plan(self) -> dict[str, Any]:
        """``plan.json`` as the run now stands."""
        return json.loads(self._c.plan())

    def phase_steps(self) -> dict[str, int]:
        """Steps each phase plans."""
        return json.loads(self._c.phase_steps())

    def recipe_toml(self) -> str:
        """The recipe in force, resolved."""
        return self._c.recipe_toml()
