"""Links the torch of one environment (and everything torch itself requires) into a directory
that another environment puts on its path with a ``.pth`` file: the compatibility venvs test
their framework versions with the same torch as the main one, without a second multi-GB copy.

Run with the main environment's Python: ``python share_torch.py DEST``. DEST then holds one
symlink per top-level file or directory of each distribution in torch's dependency closure,
``*.dist-info`` included (so pip in the other venv sees torch installed and does not fetch it).
"""

from __future__ import annotations

import sys
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(root: str) -> dict[str, Distribution]:
    """``root`` and every distribution it requires, transitively, with the extras each asks for
    (markers evaluated for this interpreter and platform)."""
    found: dict[str, Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(root, "")]
    while todo:
        name, extra = todo.pop()
        key = (canonicalize_name(name), extra)
        if key in done:
            continue
        done.add(key)
        try:
            dist = found.setdefault(key[0], distribution(key[0]))
        except PackageNotFoundError:
            continue  # a requirement nothing installed here
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo.extend((req.name, e) for e in ["", *sorted(req.extras)])
    return found


def top_levels(dist: Distribution) -> set[str]:
    """The top-level files and directories ``dist`` installed in its site-packages (scripts, which
    it installed outside, left out)."""
    return {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] not in ("..", "__pycache__")}


def main(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        if old.is_symlink():
            old.unlink()
    names = []
    for name, dist in sorted(closure("torch").items()):
        site = Path(str(dist.locate_file("")))
        for entry in sorted(top_levels(dist)):
            link = dest / entry
            if not link.exists() and (site / entry).exists():
                link.symlink_to(site / entry)
        names.append(f"{name}=={dist.version}")
    print("shared from", sys.prefix + ":", " ".join(names))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
