"""Shared pieces of the package's tests: tiny tasks that learn in seconds on a CPU, and the
optional packages a test module needs (skipped without them, except in CI)."""

from __future__ import annotations

import importlib
import json
import os
import random
from importlib.metadata import requires
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, Sequence, TypeVar, cast

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from contrai import DroppableDataset

# torch is imported where a test uses it: this module is loaded before any test module, also
# where only the doctor's, the data stage's and the recipe's tests can run.
if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset
    from transformers import BertForSequenceClassification

# The optional packages some tests need, by the name they are imported as: the distribution that
# brings each (all of them in contrai-ml's [test] extra, which test_install checks).
OPTIONAL = {
    "torch": "torch",
    "transformers": "transformers",
    "lightning": "lightning",
    "accelerate": "accelerate",
    "peft": "peft",
    "trl": "trl",
    "ray": "ray",
    "polars": "polars",
    "gguf": "gguf",
    "compressed_tensors": "compressed-tensors",
    "llama_cpp": "llama-cpp-python",
    "wandb": "wandb",
    "mlflow": "mlflow",
    "tensorboard": "tensorboard",
    "trackio": "trackio",
    # Axolotl's plugin config types (contrai.integrations.axolotl), Axolotl itself not installed.
    "pydantic": "pydantic",
}


def require(*modules: str) -> Any:
    """Skips the test (or, at a module's top, the whole module) unless each of ``modules``
    imports, naming what is missing; with ``CONTRAI_REQUIRE_OPTIONAL=1`` (CI, whose venv has
    them all) a missing one fails instead of skipping. Returns the last module, untyped (some of
    these packages ship no types, or partial ones)."""
    module = None
    for name in modules:
        assert name in OPTIONAL, f"{name} is not listed in conftest.OPTIONAL"
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            absent(f"{OPTIONAL[name]} is not installed ({e}); pip install 'contrai-ml[test]' brings every test's "
                   "packages", "CONTRAI_REQUIRE_OPTIONAL")
    return module


def absent(why: str, required: str) -> NoReturn:
    """Skips the test (or the module, at its top) saying why, or fails where the environment
    variable ``required`` is 1: CI, which must have what the test needs."""
    if os.environ.get(required) == "1":
        pytest.fail(why, pytrace=False)
    pytest.skip(why, allow_module_level=True)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


def token_task(n: int, seed: int, noise: float = 0.03) -> list[dict[str, torch.Tensor]]:
    """Sequences of 16 tokens whose first token says the label, a share of labels flipped."""
    import torch

    g = random.Random(seed)
    out = []
    for _ in range(n):
        y = g.randint(0, 1)
        ids = [g.randint(5, 99) for _ in range(16)]
        ids[0] = 3 if y else 4
        if g.random() < noise:
            y = 1 - y
        out.append({"input_ids": torch.tensor(ids), "attention_mask": torch.ones(16, dtype=torch.long),
                    "labels": torch.tensor(y)})
    return out


class ServedRows(DroppableDataset):
    """Records the original rows served once something was dropped."""

    def __init__(self, data: Sequence[Any]) -> None:
        super().__init__(data)
        self.after_drop: list[int] = []

    def __getitem__(self, i: int) -> Any:
        if self.dropped:
            self.after_drop.append(self._serve[i])
        return super().__getitem__(i)


def tiny_bert() -> BertForSequenceClassification:
    """A 2-layer BERT classifier with random weights (no download)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    # num_labels is no field of transformers' dataclass-typed configs: PreTrainedConfig takes it
    # among its extra keyword arguments, which the __init__ mypy synthesizes does not list.
    cfg = BertConfig(  # type: ignore[call-arg]
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        num_labels=2, max_position_embeddings=32)
    return BertForSequenceClassification(cfg)


HF_RECIPE = """
[run]
eval_every = 10
checkpoint_every = 10
[validate]
steps = 20
batch = 8
lr = 3e-3
min_fall = 0.5
[main]
steps = 60
batch = 16
lr = 2e-3
[contract]
eval_every = 5
prune_every = 4
stable_checkpoints = 1000
patience = 1000
divergence = 1.0
prune = [{ params = "*.intermediate.dense.weight", init = 0.1, final = 0.5 },
         { params = "*.attention.self.*.weight", init = 0.1, final = 0.2 }]
[refine.distill]
enabled = false
"""


class MapStyle(Protocol[T_co]):
    """A map-style dataset as ``DataLoader`` reads it: ``__getitem__`` and ``__len__``."""

    def __getitem__(self, i: int, /) -> T_co: ...

    def __len__(self) -> int: ...


def dataset(rows: MapStyle[T]) -> Dataset[T]:
    """``rows`` (a list, a ``DroppableDataset``) as the ``Dataset`` torch's ``DataLoader`` is typed to
    take: any map-style sequence is one to it at run time."""
    return cast("Dataset[T]", rows)


@pytest.fixture
def recipe_file(tmp_path: Path) -> Path:
    p = tmp_path / "recipe.toml"
    p.write_text(HF_RECIPE)
    return p


def declared(extra: str, package: str) -> SpecifierSet:
    """The versions of ``package`` the installed contrai-ml declares for its ``extra``."""
    for line in requires("contrai-ml") or []:
        req = Requirement(line)
        if req.name == package and req.marker is not None and req.marker.evaluate({"extra": extra}):
            return req.specifier
    raise AssertionError(f"contrai-ml declares no {package} for [{extra}]")


def real_llm() -> Path:
    """The SmolLM2-135M folder that ``CONTRAI_LLM`` names (``scripts/fixtures/smollm2.py`` makes
    it); CI makes it and may not go without it."""
    path = os.environ.get("CONTRAI_LLM")
    if path and (Path(path) / "model.safetensors").exists():
        return Path(path)
    absent("no pretrained LLM: CONTRAI_LLM names no SmolLM2 folder (python scripts/fixtures/smollm2.py DIR makes "
           "one)", "CONTRAI_REQUIRE_SHARED")


def decisions(run: Path) -> list[dict[str, Any]]:
    """A run directory's decisions, in order."""
    return [json.loads(x) for x in (run / "decisions.jsonl").read_text().splitlines()]


def shared(rel: str) -> Path:
    """A file of ../shared (skipped when absent; a failure in CI, which must have it)."""
    path = Path(__file__).resolve().parents[4] / "shared" / rel
    if not path.exists():
        absent(f"{path} is missing", "CONTRAI_REQUIRE_SHARED")
    return path


def email_rows() -> list[dict[str, Any]]:
    """The rows of ../shared/data/spamassassin.jsonl (real e-mails: id, group, label, subject,
    text), in the file's order."""
    data = shared("data/spamassassin.jsonl")
    return [json.loads(x) for x in data.read_text().split("\n") if x.strip()]


def emails() -> list[str]:
    """The texts of the real e-mails, in the file's order."""
    return [r["text"] for r in email_rows()]
