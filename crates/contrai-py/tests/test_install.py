"""The package as pip installs it: the ``contrai`` command a wheel carries, what works without
torch, and the ``[test]`` extra that brings every package a test may need."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import PackagePath, files, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import OPTIONAL

import contrai


def carried_command() -> PackagePath | None:
    """The ``contrai`` script the installed distribution lists (a wheel's), or None (a source build's)."""
    return next((f for f in files("contrai-ml") or [] if f.name == "contrai" and f.parent.name == "bin"), None)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120)


def test_the_command_that_came_with_the_package_is_found_and_says_its_version_and_commit() -> None:
    script = carried_command()
    if script is None:
        with pytest.raises(contrai.ContraiBinNotFound, match=r"cargo install --path crates/contrai-cli"):
            contrai.find_contrai_bin()
        done = run(sys.executable, "-m", "contrai", "--version")
        assert done.returncode == 2 and "no `contrai` command came with this install" in done.stderr
        return
    binary = contrai.find_contrai_bin()
    assert Path(binary).resolve() == Path(str(script.locate())).resolve(), "the script pip installed, not another"
    version = run(binary, "--version")
    assert version.returncode == 0, version.stderr
    assert re.fullmatch(rf"contrai {re.escape(contrai.__version__)} \([0-9a-f]{{12}}(-dirty)?\)\n", version.stdout)
    assert run(sys.executable, "-m", "contrai", "--version").stdout == version.stdout


def test_import_contrai_and_its_tools_need_no_torch(tmp_path: Path) -> None:
    log = tmp_path / "metrics.csv"
    log.write_text("step,train_loss\n" + "".join(f"{s},{2.3 / (1 + s / 20):.4f}\n" for s in range(1, 200)))
    code = f"""
import sys
sys.modules["torch"] = None  # import torch raises ImportError
import contrai
runs = contrai.doctor({str(log)!r})
assert [r["verdict"] for r in runs] == ["healthy"], runs
try:
    contrai.ResumableLoader
except ImportError as e:
    print("loader:", e)
"""
    done = run(sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    assert "loader: import of torch halted" in done.stdout, "the loader alone needs torch"


def test_the_test_extra_brings_every_package_a_test_may_require() -> None:
    extra = {canonicalize_name(r.name) for r in map(Requirement, requires("contrai-ml") or [])
             if r.marker is not None and r.marker.evaluate({"extra": "test"})}
    assert {"pytest", "packaging"} <= extra
    missing = {canonicalize_name(d) for d in OPTIONAL.values()} - extra
    assert not missing, f"conftest.require() may ask for {sorted(missing)}, which contrai-ml[test] does not bring"
