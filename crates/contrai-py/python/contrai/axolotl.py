"""``contrai.axolotl``, the import path from before the package was grouped: the very module
:mod:`contrai.integrations.axolotl` (the same object, so what is set on one is set on the other)."""

import sys

from contrai.integrations import axolotl as _module
from contrai.integrations.axolotl import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _module
