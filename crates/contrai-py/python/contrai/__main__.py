"""``python -m contrai ARGS`` runs the ``contrai`` command that came with this package."""

from __future__ import annotations

import os
import subprocess
import sys

from contrai._bin import ContraiBinNotFound, find_contrai_bin


def main() -> int:
    """Hands the process over to the command (Windows has no exec: it waits for it instead)."""
    try:
        binary = find_contrai_bin()
    except ContraiBinNotFound as e:
        print(f"contrai: {e}", file=sys.stderr)
        return 2
    if sys.platform == "win32":
        return subprocess.run([binary, *sys.argv[1:]]).returncode
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
