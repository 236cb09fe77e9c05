"""The Rust core's tools as Python functions: recipe check, doctor, report, data audit and split."""

from __future__ import annotations

import json
import os
from typing import Any

from contrai import _core


def recipe_check(text: str, path: str = "recipe.toml") -> str:
    """The recipe resolved, every default filled in, as TOML.

    Raises ``ValueError`` naming the file, the line, the key and the nearest valid key.
    """
    return _core.recipe_check(text, path)


def job_recipe() -> str:
    """The default recipe for a Hugging Face or Lightning job (``contrai recipe init --for hf``):
    ``main.steps`` left out, so the Trainer's own ``max_steps`` (or epochs × batches) holds the
    plan, the phases at the recipe's shares."""
    return _core.job_recipe()


def default_recipe() -> str:
    """The default recipe, every key commented (what ``contrai recipe init`` prints)."""
    return _core.default_recipe()


def doctor(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The doctor's report of a training log or run directory: one dict a run (verdict, findings)."""
    runs: list[dict[str, Any]] = json.loads(_core.doctor(os.fspath(path)))
    return runs


def report(path: str | os.PathLike[str]) -> str:
    """The self-contained HTML report of a training log or run directory."""
    return _core.report(os.fspath(path))


def audit(
    path: str | os.PathLike[str],
    text: str = "text",
    label: str = "label",
    columns: list[str] | None = None,
) -> dict[str, Any]:
    """The data audit of a JSONL/CSV/TSV/Parquet file: duplicates, near-duplicates, conflicts.

    ``columns`` names the columns of a CSV/TSV file without a header row, e.g. ``["label", "text"]``.
    """
    audit: dict[str, Any] = json.loads(_core.audit(os.fspath(path), text, label, columns))
    return audit


def split(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    ratios: tuple[float, float, float] | None = None,
    seed: int | None = None,
    text: str | None = None,
    label: str | None = None,
    columns: list[str] | None = None,
    parent: str | os.PathLike[str] | None = None,
    allow_shrink: bool = False,
    force: bool = False,
    keep_previous: bool = False,
) -> dict[str, Any]:
    """Splits a file into train/val/holdout under ``out`` with no leak; returns the manifest.

    ``ratios`` default to (0.85, 0.10, 0.05), ``seed`` to 42, the fields to ``text`` and
    ``label``. ``columns`` names the columns of a CSV/TSV file without a header row; the
    partitions are written with that header. ``parent`` (an earlier split's directory) makes this
    a new version of it: every old sample keeps its partition, new near-copies follow them, a new
    row that conflicts with a parent's sample is the one dropped, its settings are the defaults,
    and a holdout that would lose old samples is refused unless ``allow_shrink``. The split is
    written beside ``out`` and put in place in one step; a split already in ``out`` is replaced
    only with ``force`` (and kept as ``<out>.prev`` with ``keep_previous``).
    """
    manifest: dict[str, Any] = json.loads(_core.split(
        os.fspath(path), os.fspath(out), ratios, seed, text, label, columns,
        None if parent is None else os.fspath(parent), allow_shrink, force, keep_previous))
    return manifest
