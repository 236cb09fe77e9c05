"""The framework requirements a compatibility venv installs, read from the package's
``pyproject.toml``: ``oldest`` pins each to the floor of its declared range (``>=``), ``newest``
asks for the declared range itself (pip then takes the newest release inside it).

``python pins.py oldest|newest PYPROJECT`` prints one requirement a line.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

# The frameworks contrai's compat modules reach into, and the libraries its tests run them with.
FRAMEWORKS = ("transformers", "lightning", "accelerate", "peft")


def declared(pyproject: Path) -> dict[str, Requirement]:
    """Each framework's requirement, from the optional dependencies that declare a range for it."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    found: dict[str, Requirement] = {}
    for lines in extras.values():
        for line in lines:
            req = Requirement(line)
            if req.name in FRAMEWORKS and req.specifier:
                found.setdefault(req.name, req)
    missing = set(FRAMEWORKS) - set(found)
    if missing:
        raise SystemExit(f"{pyproject}: no version range declared for {sorted(missing)}")
    return found


def floor(req: Requirement) -> str:
    """The ``>=`` bound of a range."""
    lows = [s.version for s in req.specifier if s.operator == ">="]
    if len(lows) != 1:
        raise SystemExit(f"{req}: one >= bound is needed to know the oldest version")
    return lows[0]


def pins(which: str, pyproject: Path) -> list[str]:
    reqs = declared(pyproject)
    if which == "oldest":
        return [f"{name}=={floor(reqs[name])}" for name in FRAMEWORKS]
    if which == "newest":
        return [f"{name}{reqs[name].specifier}" for name in FRAMEWORKS]
    raise SystemExit(f"oldest or newest, not {which!r}")


if __name__ == "__main__":
    print("\n".join(pins(sys.argv[1], Path(sys.argv[2]))))
