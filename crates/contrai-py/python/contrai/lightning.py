"""``contrai.lightning``, the import path from before the package was grouped: the very module
:mod:`contrai.integrations.lightning` (the same object, so what is set on one is set on the other)."""

import sys

from contrai.integrations import lightning as _module
from contrai.integrations.lightning import *  # noqa: F403  (the names, for type checkers)

sys.modules[__name__] = _module
