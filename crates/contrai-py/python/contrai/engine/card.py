"""The PyTorch engine's ``final/model-card.json``: the exported model and its quantized variants
(and their GGUF files) side by side, each with its parameters, zero weights, bytes on disk, validation and holdout figures
and CPU latency — the card the Burn engine writes (``contrai_run::ModelCard``), which
``contrai report`` shows; a job's own model is named by its class instead of a recipe ``[model]``."""

from __future__ import annotations

import importlib.util
import json
import math
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

# Timed forward passes a variant (after one to warm up); the card gives their median.
LATENCY_REPEATS = 5


@dataclass
class Variant:
    """One exported model, as ``contrai_run::Variant`` holds it."""

    name: str
    file: str | None
    parameters: int
    zero_weights: float
    bytes: int
    val_accuracy: float
    holdout_accuracy: float
    holdout_loss: float
    latency_ms: float | None
    note: str


def describe(state: Mapping[str, torch.Tensor]) -> tuple[int, float]:
    """A state's parameters and the share of its weight-matrix entries (2-D ``….weight``
    tensors) that are exactly zero, as a variant gives them; a tied tensor (the head sharing the
    embeddings) counted once."""
    entries: dict[int, int] = {}
    zeros: dict[int, tuple[int, int]] = {}
    for name, t in state.items():
        entries[t.data_ptr()] = t.numel()
        if name.endswith(".weight") and t.dim() == 2:
            zeros[t.data_ptr()] = (int((t == 0).sum()), t.numel())
    total = sum(n for _, n in zeros.values())
    return sum(entries.values()), (sum(z for z, _ in zeros.values()) / total if total else 0.0)


def nan0(x: float) -> float:
    """A NaN where the format wants a number: 0 (an accuracy that was not measurable)."""
    return 0.0 if x is None or not math.isfinite(x) else x


def disk_bytes(path: Path) -> int:
    """Bytes of a file, or of the weight files of a folder (``*.safetensors``, ``*.pt``)."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for pattern in ("*.safetensors", "*.pt") for f in path.glob(pattern))


def latency_ms(forward: Callable[[], Any]) -> float:
    """Median milliseconds of ``forward`` (no gradients), after one call to warm up."""
    times = []
    with torch.no_grad():
        for i in range(LATENCY_REPEATS + 1):
            t = time.perf_counter()
            forward()
            if i:
                times.append(1000 * (time.perf_counter() - t))
    return statistics.median(times)


# What runs in the child process that times a GGUF file: llama.cpp's own crash (a CPU kernel's
# fault, as its AMX path on SmolLM2 on an Intel Xeon with AMX) must not take the run down with it.
LLAMA_CPP_TIMING = """
import json, statistics, sys, time
import llama_cpp
path, rows, threads, repeats = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
longest = max(map(len, rows))
llm = llama_cpp.Llama(model_path=path, n_ctx=longest + 8, n_batch=longest, n_threads=threads, verbose=False)
times = []
for i in range(repeats + 1):
    t = time.perf_counter()
    for row in rows:
        llm.reset()
        llm.eval(row)
    if i:
        times.append(1000 * (time.perf_counter() - t))
llm.close()
print(json.dumps(statistics.median(times)))
"""


def llama_cpp_latency_ms(gguf: Path, rows: list[list[int]] | None) -> tuple[float | None, str]:
    """Median milliseconds llama.cpp (``llama-cpp-python``) takes to run a GGUF file over the token
    ``rows`` (one after another, on PyTorch's thread count, after a first run to warm up), and what
    the figure is — or None and why there is none. It runs in a child process."""
    if not rows:
        return None, "no latency: the card's batch holds no token ids"
    if importlib.util.find_spec("llama_cpp") is None:
        return None, "no latency: llama-cpp-python is not installed"
    threads = torch.get_num_threads()
    done = subprocess.run([sys.executable, "-c", LLAMA_CPP_TIMING, str(gguf), json.dumps(rows), str(threads),
                           str(LATENCY_REPEATS)], capture_output=True, text=True)
    if done.returncode != 0:
        how = (f"killed by {signal.Signals(-done.returncode).name}" if done.returncode < 0
               else (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1])
        return None, f"no latency: llama.cpp failed on it ({how})"
    return float(done.stdout), f"latency: llama.cpp on {threads} CPU threads, the batch's rows one after another"


def dtype_name(model: torch.nn.Module) -> str:
    """The name of the model's weights' type as the cards write it (``f32``, ``bf16``, ``f16``)."""
    dtype = next(model.parameters()).dtype
    return {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}.get(dtype, str(dtype))


def card(model: torch.nn.Module, classes: list[str], sparsity: dict[str, float], checkpointing: bool,
         latency_batch: int, variants: list[Variant]) -> dict[str, Any]:
    """The card's JSON object (non-finite figures as the run format writes them)."""
    return {"architecture": type(model).__name__, "classes": classes,
            "parameters": variants[0].parameters if variants else 0, "sparsity": sparsity,
            "gradient_checkpointing": checkpointing, "latency_batch": latency_batch,
            "variants": [asdict(x) for x in variants]}
