"""The package as it is grouped — ``contrai.engine``, ``contrai.integrations``, ``contrai.quant`` —
and the import paths from before the grouping, which still give the very same modules."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Iterator

import pytest

from conftest import require

# Each old path, the module it now is, and the optional packages that module imports.
MOVED = [
    ("contrai.hf", "contrai.integrations.hf", ["torch", "transformers"]),
    ("contrai.lightning", "contrai.integrations.lightning", ["torch", "lightning"]),
    ("contrai.axolotl", "contrai.integrations.axolotl", ["torch", "transformers", "pydantic"]),
    ("contrai.llamafactory", "contrai.integrations.llamafactory", ["torch", "transformers"]),
    ("contrai.serving", "contrai.quant.serving", ["torch"]),
    ("contrai.weightquant", "contrai.quant.weights", ["torch"]),
]


@pytest.fixture
def axolotl_base() -> Iterator[None]:
    """Axolotl's plugin base class where Axolotl is not installed (it is not in the tests' venv:
    its pinned torch differs), as ``axolotl.integrations.base.BasePlugin``; the modules imported
    against it are forgotten afterwards."""
    fake = {}
    try:
        importlib.import_module("axolotl.integrations.base")
    except ImportError:
        for name in ("axolotl", "axolotl.integrations", "axolotl.integrations.base"):
            fake[name] = types.ModuleType(name)
        fake["axolotl.integrations.base"].BasePlugin = type("BasePlugin", (), {})  # type: ignore[attr-defined]
    sys.modules.update(fake)
    yield
    for name in [*fake, "contrai.axolotl", "contrai.integrations.axolotl"] if fake else []:
        sys.modules.pop(name, None)


@pytest.mark.parametrize(("old", "new", "needs"), MOVED, ids=[old for old, _, _ in MOVED])
def test_an_import_path_from_before_the_grouping_is_the_grouped_module(old: str, new: str, needs: list[str],
                                                                        axolotl_base: None) -> None:
    require(*needs)
    module = importlib.import_module(old)
    assert module is importlib.import_module(new), f"{old} is not {new}"
    assert getattr(importlib.import_module("contrai"), old.split(".")[1]) is module
    public = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    for name in public:
        assert hasattr(module, name), f"{old}.{name}"


def test_the_callbacks_are_where_users_import_them_from() -> None:
    require("torch", "transformers", "lightning")
    from contrai.hf import ContraiCallback as HF
    from contrai.integrations.hf import ContraiCallback
    from contrai.lightning import ContraiCallback as PL
    from contrai.integrations.lightning import ContraiCallback as Lightning

    assert HF is ContraiCallback and PL is Lightning


def test_the_sharded_audit_is_importable_from_data_as_before() -> None:
    import contrai.data
    import contrai.integrations.ray

    assert contrai.data.signatures is contrai.integrations.ray.signatures
    assert contrai.data.near_duplicate_clusters is contrai.integrations.ray.near_duplicate_clusters


def test_the_engine_package_exports_what_the_engine_module_did() -> None:
    require("torch")
    import contrai.engine
    import contrai.engine.engine

    assert contrai.engine.__all__ == contrai.engine.engine.__all__
    assert contrai.engine.Engine is contrai.engine.engine.Engine
