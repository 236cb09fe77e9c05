"""Where the ``contrai`` command that came with this package is.

A wheel carries the command-line tool as a script (``contrai_ml-<v>.data/scripts/contrai``): pip
puts it in the scripts folder of the environment it installs into — the venv's ``bin``, the user
scheme's, a ``--prefix``'s or a ``--target``'s. A build from the sdist carries none.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

NAME = "contrai" + (sysconfig.get_config_var("EXE") or "")


class ContraiBinNotFound(FileNotFoundError):
    """This install carries no ``contrai`` command (built from the sdist, or its script removed)."""


def find_contrai_bin() -> str:
    """The ``contrai`` command installed with this package, or :class:`ContraiBinNotFound` saying how to get one."""
    for folder in _script_folders():
        path = folder / NAME
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise ContraiBinNotFound(
        "no `contrai` command came with this install of contrai-ml (the sdist builds the Python "
        "module only): install a wheel (pip install contrai-ml), unpack the release archive "
        "contrai-<version>-x86_64-linux.tar.gz, or build it in a clone of the repository: "
        "cargo install --path crates/contrai-cli"
    )


def _script_folders() -> list[Path]:
    """Where pip may have put the package's scripts, most likely first."""
    package = Path(__file__).resolve().parent
    folders = [Path(sysconfig.get_path("scripts"))]
    folders.append(Path(sysconfig.get_path("scripts", vars={"base": sys.base_prefix})))
    folders.append(Path(sysconfig.get_path("scripts", scheme=sysconfig.get_preferred_scheme("user"))))
    # pip --prefix P: the package is P/lib/pythonX.Y/site-packages/contrai, the scripts P/bin.
    site = package.parent
    if site.name == "site-packages" and site.parent.name.startswith("python"):
        folders.append(site.parent.parent.parent / "bin")
    # pip --target T: the package is T/contrai, the scripts T/bin.
    folders.append(site / "bin")
    return list(dict.fromkeys(folders))
