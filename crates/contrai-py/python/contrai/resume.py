"""What a checkpoint carries so that a resumed job continues exactly where it stopped, beyond the
weights, optimizer and the lifecycle's record — and the checks a resume makes before its first
step.

==============================  ===============================================================
carried                         checked on resume, before the first step
==============================  ===============================================================
the RNG states of every rank    put back on each rank as the first step begins (after the data
(torch CPU and CUDA, NumPy,     loader drew its batch, as the uninterrupted job would have them):
Python)                         dropout and sampling continue the stopped job's streams
the LR of the next step         the conductor's plan for that step must give it (else the recipe
                                changed under the run: the resume stops and says both)
==============================  ===============================================================
"""

from __future__ import annotations

import base64
import random
from typing import Any

import torch

try:
    import numpy as np
except ImportError:  # NumPy is optional to torch; its generator is then nobody's to keep
    np = None  # type: ignore[assignment]


def rng_states() -> dict[str, Any]:
    """This process's random number generators, in plain values (JSON, and the ``weights_only``
    unpickling a framework's checkpoint loader may use, both keep them)."""
    py = random.getstate()
    states: dict[str, Any] = {"python": [py[0], list(py[1]), py[2]],
                              "torch": base64.b64encode(torch.random.get_rng_state().numpy().tobytes()).decode()}
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        states["numpy"] = [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode() for s in torch.cuda.get_rng_state_all()]
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    """Puts back what :func:`rng_states` took."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.random.set_rng_state(_bytes_tensor(states["torch"]))
    if np is not None and "numpy" in states:
        name, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_bytes_tensor(s) for s in states["cuda"]])


def _bytes_tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def gathered(obj: Any, world: int) -> list[Any]:
    """``obj`` of every rank, in rank order (``[obj]`` on one process). Every rank must call it."""
    if world <= 1 or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [obj]
    out: list[Any] = [None] * world
    torch.distributed.all_gather_object(out, obj)
    return out


def check_lr(recorded: float | None, planned: float | None) -> str | None:
    """What differs between the LR a checkpoint recorded for its next step and the one the resumed
    plan gives (``None`` when they agree, or either is unknown)."""
    if recorded is None or planned is None or abs(recorded - planned) <= 1e-12 * max(abs(recorded), 1e-30):
        return None
    return (f"the checkpoint recorded LR {recorded:.6g} for its next step, the resumed schedule gives {planned:.6g}: "
            "the recipe changed under the run (resume with the recipe it started with, or start a new run)")
