"""Every place the package reaches into a framework past its public API, one module a framework:
``contrai.integrations._compat.hf`` (transformers, Accelerate) and
``contrai.integrations._compat.lightning`` (Lightning).

Each module declares the version range it is tested with (``TESTED``, the same range
``pyproject.toml`` declares in its optional dependencies) and warns, without failing, when the
installed version is outside it: what these functions reach into is what a new release may move.
"""

from __future__ import annotations

import warnings
from importlib.metadata import version

from packaging.specifiers import SpecifierSet


class UntestedVersion(UserWarning):
    """The installed framework is outside the version range this package is tested with."""


def check_version(package: str, tested: tuple[str, ...]) -> bool:
    """Whether the installed ``package`` is within ``tested``; a :class:`UntestedVersion` warning
    when it is not (the package may still work: nothing is refused)."""
    installed = version(package)
    spec = SpecifierSet(",".join(tested))
    if spec.contains(installed, prereleases=True):
        return True
    warnings.warn(f"contrai-ml is tested with {package}{spec}, and {package} {installed} is installed: the "
                  f"framework internals contrai.integrations._compat reaches into may have moved (report what breaks)",
                  UntestedVersion, stacklevel=3)
    return False
