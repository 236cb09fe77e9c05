"""``contrai.serving``, the import path from before the package was grouped: the very module
:mod:`contrai.quant.serving` (the same object, so what is set on one is set on the other)."""

import sys

from contrai.quant import serving as _module
from contrai.quant.serving import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _module
