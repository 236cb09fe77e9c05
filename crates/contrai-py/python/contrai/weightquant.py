"""Weight-only quantization of a language model's linear layers: int8 or int4 codes with one
symmetric scale a group of input weights (128 by default), round to nearest.

Everything here works one layer at a time on the device where the layer lives, so that a model
is never copied whole: :func:`quantized_in_place` evaluates a variant by putting each layer's
dequantized weights in place of its own (the dense ones spilled to disk meanwhile, read back
after), and the exports (``contrai.serving``) quantize and write one layer at a time.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

# Floating dtypes a weight may have; anything else is refused naming the layer.
FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class QuantizeError(ValueError):
    """A layer or a request the quantization cannot serve; the message names the layer."""


@dataclass(frozen=True)
class Scheme:
    """Bits a weight and input weights a scale (symmetric, zero point 0)."""

    bits: int
    group: int = 128

    def __post_init__(self) -> None:
        if self.bits not in (4, 8):
            raise QuantizeError(f"weight-only quantization has 4 or 8 bits, not {self.bits}")
        if self.group < 1:
            raise QuantizeError(f"a quantization group holds at least one weight, not {self.group}")

    @property
    def qmax(self) -> int:
        """The largest code; codes lie in [-qmax - 1, qmax] and the scale maps |w|'s max to qmax."""
        return (1 << (self.bits - 1)) - 1

    @property
    def name(self) -> str:
        return f"int{self.bits}-g{self.group}"


@dataclass
class Codes:
    """A weight matrix quantized: ``codes`` (int8, the weight's shape) and ``scale`` (float32,
    ``[rows, columns / group]``)."""

    codes: torch.Tensor
    scale: torch.Tensor

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        rows, cols = self.codes.shape
        group = cols // self.scale.shape[1]
        w = self.codes.view(rows, -1, group).float() * self.scale.unsqueeze(-1)
        return w.view(rows, cols).to(dtype)


def quantize(name: str, weight: torch.Tensor, scheme: Scheme) -> Codes:
    """One matrix's codes and scales, on its own device; a weight :func:`check_weight` refuses is
    refused naming the layer ``name``."""
    check_weight(name, weight, scheme)
    rows, cols = weight.shape
    w = weight.detach().float().view(rows, cols // scheme.group, scheme.group)
    scale = w.abs().amax(dim=-1) / scheme.qmax
    # An all-zero group (a pruned unit's) keeps scale 0 and codes 0.
    codes = torch.where(scale.unsqueeze(-1) > 0, w / scale.clamp_min(torch.finfo(torch.float32).tiny).unsqueeze(-1),
                        torch.zeros_like(w))
    codes = codes.round().clamp(-scheme.qmax - 1, scheme.qmax).to(torch.int8)
    return Codes(codes.view(rows, cols), scale)


def targets(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Linear]]:
    """The linear layers a weight-only scheme quantizes: every ``nn.Linear`` but the output head
    (``lm_head``, kept in full precision as llm-compressor and vLLM's defaults do)."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
            yield name, module


def fitting_group(model: torch.nn.Module, most: int = 128) -> int:
    """The largest group of at most ``most`` input weights that divides every target's width
    (128 for BERT-base's 768 and 3,072; 96 for SmolLM2-135M's 576 and 1,536)."""
    widths = [layer.in_features for _, layer in targets(model)]
    if not widths:
        raise QuantizeError("the model has no linear layer to quantize (every nn.Linear but lm_head)")
    width = math.gcd(*widths)
    return max(g for g in range(1, min(most, width) + 1) if width % g == 0)


def check_weight(name: str, weight: torch.Tensor, scheme: Scheme) -> None:
    """The weight of layer ``name`` can be quantized under ``scheme`` (a float matrix whose rows
    the group divides), or why not, naming it."""
    if weight.dtype not in FLOATS:
        raise QuantizeError(f"{name}.weight: dtype {weight.dtype} cannot be quantized (float32, float16 or bfloat16 "
                            "expected)")
    if weight.dim() != 2:
        raise QuantizeError(f"{name}.weight: a weight matrix has 2 dimensions, this one {weight.dim()}")
    if weight.shape[1] % scheme.group:
        raise QuantizeError(f"{name}.weight: {weight.shape[1]} input weights a row is not a multiple of the group of "
                            f"{scheme.group}")


def check(model: torch.nn.Module, scheme: Scheme) -> None:
    """Every target quantizable under ``scheme``, or the first that is not, by name."""
    for name, layer in targets(model):
        check_weight(name, layer.weight, scheme)


class Quantized:
    """A model's quantized layers, one file of codes a layer in ``folder``, by layer name."""

    def __init__(self, folder: Path, scheme: Scheme, method: str) -> None:
        self.folder, self.scheme, self.method = folder, scheme, method
        self.files: dict[str, Path] = {}

    def put(self, name: str, q: Codes) -> None:
        path = self.folder / f"codes-{len(self.files)}.pt"
        torch.save({"codes": q.codes.cpu(), "scale": q.scale.cpu()}, path)
        self.files[name] = path

    def codes(self, name: str) -> Codes:
        saved = torch.load(self.files[name], weights_only=True)
        return Codes(saved["codes"], saved["scale"])

    def layer_of(self, key: str) -> str | None:
        """The quantized layer whose weight the state-dict ``key`` is, or None."""
        layer = key.removesuffix(".weight")
        return layer if key.endswith(".weight") and layer in self.files else None


Calibrate = Callable[[torch.nn.Module], None]


@contextlib.contextmanager
def quantized_in_place(model: torch.nn.Module, scheme: Scheme, calibrate: Calibrate | None = None,
                       spill: Path | None = None) -> Iterator[Quantized]:
    """The model with every target's weight replaced by its dequantized codes, one block of
    layers at a time: round to nearest, or GPTQ's error compensation when ``calibrate`` (which
    runs the model on calibration batches) is given. The dense weights are spilled to a file a
    layer and put back on exit, so no second copy of the model is held in memory; the codes stay
    on disk for the exports while the context lasts."""
    check(model, scheme)
    with tempfile.TemporaryDirectory(dir=spill) as tmp:
        quantized = Quantized(Path(tmp), scheme, "gptq" if calibrate else "rtn")
        saved: list[tuple[torch.nn.Linear, Path]] = []
        try:
            for block in blocks(model):
                hessians = input_hessians(model, block, calibrate) if calibrate else {}
                for name, layer in block:
                    path = Path(tmp) / f"dense-{len(saved)}.pt"
                    torch.save(layer.weight.detach().cpu(), path)
                    saved.append((layer, path))
                    h = hessians.get(name)
                    q = gptq(name, layer.weight, h, scheme) if h is not None else quantize(name, layer.weight, scheme)
                    quantized.put(name, q)
                    with torch.no_grad():
                        layer.weight.copy_(q.dequantized(layer.weight.dtype))
            yield quantized
        finally:
            with torch.no_grad():
                for layer, path in saved:
                    layer.weight.copy_(torch.load(path, weights_only=True))


def blocks(model: torch.nn.Module) -> list[list[tuple[str, torch.nn.Linear]]]:
    """The targets grouped by the repeated block that holds them (``layers.3``, ``h.3`` …), in
    the model's order; a target outside any is a block of its own. GPTQ calibrates one block at a
    time, on inputs that went through the blocks quantized before it."""
    out: dict[str, list[tuple[str, torch.nn.Linear]]] = {}
    for name, layer in targets(model):
        parts = name.split(".")
        cut = next((i + 1 for i, p in enumerate(parts) if p.isdigit()), len(parts))
        out.setdefault(".".join(parts[:cut]), []).append((name, layer))
    return list(out.values())


class _Stop(Exception):
    """Raised past the block being calibrated: the rest of the forward pass is not needed."""


def input_hessians(model: torch.nn.Module, block: list[tuple[str, torch.nn.Linear]],
                   calibrate: Calibrate) -> dict[str, torch.Tensor]:
    """Each layer's ``2 X^T X / n`` over the calibration inputs it sees (GPTQ's Hessian of the
    layer's squared error); the forward passes stop once the block's last layer has run."""
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    handles = []
    last = block[-1][0]

    def hook(name: str) -> Any:
        def record(_: torch.nn.Module, inputs: tuple[torch.Tensor, ...], __: Any) -> None:
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).float()
            if name not in sums:
                sums[name] = torch.zeros(x.shape[1], x.shape[1], device=x.device)
                counts[name] = 0
            sums[name].addmm_(x.T, x)
            counts[name] += x.shape[0]
            if name == last:
                raise _Stop
        return record

    for name, layer in block:
        handles.append(layer.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            calibrate(StopsEarly(model))
    finally:
        for h in handles:
            h.remove()
    return {n: 2 * s / max(1, counts[n]) for n, s in sums.items()}


class StopsEarly(torch.nn.Module):
    """The model, whose call returns None when the block being calibrated has run."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.inner = model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.inner(*args, **kwargs)
        except _Stop:
            return None


def gptq(name: str, weight: torch.Tensor, h: torch.Tensor, scheme: Scheme, block: int = 128,
         damp: float = 0.01) -> Codes:
    """GPTQ (Frantar et al., 2022): columns quantized in order, each one's rounding error spread
    over the columns not yet quantized through the inverse Hessian's Cholesky factor; a group's
    scale is set from its weights as they stand when its first column is reached."""
    check_weight(name, weight, scheme)
    w = weight.detach().float().clone()
    rows, cols = w.shape
    h = h.clone()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    h += damp * torch.mean(torch.diag(h)) * torch.eye(cols, device=h.device)
    hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    codes = torch.zeros(rows, cols, dtype=torch.int8, device=w.device)
    scale = torch.zeros(rows, cols // scheme.group, device=w.device)
    step = max(scheme.group, block // scheme.group * scheme.group)
    for i1 in range(0, cols, step):
        i2 = min(i1 + step, cols)
        w1, err = w[:, i1:i2].clone(), torch.zeros(rows, i2 - i1, device=w.device)
        hinv1 = hinv[i1:i2, i1:i2]
        for i in range(i2 - i1):
            col = i1 + i
            if col % scheme.group == 0:
                s = w1[:, i:i + scheme.group].abs().amax(dim=1) / scheme.qmax
                scale[:, col // scheme.group] = s
            s = scale[:, col // scheme.group]
            q = torch.where(s > 0, w1[:, i] / s.clamp_min(torch.finfo(torch.float32).tiny), torch.zeros_like(s))
            q = q.round().clamp(-scheme.qmax - 1, scheme.qmax)
            codes[:, col] = q.to(torch.int8)
            e = (w1[:, i] - q * s) / hinv1[i, i]
            w1[:, i:] -= e.unsqueeze(1) * hinv1[i, i:].unsqueeze(0)
            err[:, i] = e
        w[:, i2:] -= err @ hinv[i1:i2, i2:]
    return Codes(codes, scale)


def quantized_bytes(model: torch.nn.Module, scheme: Scheme) -> int:
    """Bytes of the model's parameters with its targets quantized under ``scheme``."""
    quantized = {id(layer.weight) for _, layer in targets(model)}
    total = 0
    for p in model.parameters():
        if id(p) in quantized:
            total += p.numel() * scheme.bits // 8 + p.numel() // scheme.group * 4
        else:
            total += p.numel() * p.element_size()
    return total
