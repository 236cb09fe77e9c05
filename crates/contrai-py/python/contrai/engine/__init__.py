"""The PyTorch engine, laid out as the Burn engine (``contrai-train``) is: the turn loop and the
actions in :mod:`contrai.engine.engine`, what a framework job gives it in ``job``, its parts in
``measure``, ``persist``, ``finale`` and ``lora``, and what they work on — the model (``model``),
pruning masks (``masks``, ``compact``), adapters (``adapters``), checkpoints (``checkpoints``),
spike triage's batches (``batches``) and the model card (``card``)."""

from contrai.engine.engine import *  # noqa: F403
from contrai.engine.engine import __all__ as __all__
