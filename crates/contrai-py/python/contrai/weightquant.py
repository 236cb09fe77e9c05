"""``contrai.weightquant``, the import path from before the package was grouped: the very module
:mod:`contrai.quant.weights` (the same object, so what is set on one is set on the other)."""

import sys

from contrai.quant import weights as _module
from contrai.quant.weights import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _module
