"""The rows a run directory keeps, as JSON Contrai's readers take back."""

from __future__ import annotations

import json
import math
from typing import Any


def words_json(value: Any) -> str:
    """JSON with each non-finite float as the word Contrai's rows read back (``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``): JSON has no such numbers, and a diverged loss must be kept."""

    def word(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
        if isinstance(v, dict):
            return {k: word(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [word(x) for x in v]
        return v

    return json.dumps(word(value))
