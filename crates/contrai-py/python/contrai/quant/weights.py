"""Weight-only quantization of a language model's linear layers: int8 or int4 codes with one
symmetric scale a group of input weights (128 by default), round to nearest or GPTQ (calibrated
block after block, each decoder layer fed the outputs of the one before it, quantized).

Everything here works one layer at a time on the device where the layer lives, so that a model
is never copied whole: :func:`quantized_in_place` evaluates a variant by putting each layer's
dequantized weights in place of its own (the dense ones spilled to disk meanwhile, read back
after), and the exports (``contrai.quant.serving``) quantize and write one layer at a time.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

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


# Runs the model on the calibration batches, each pass inside ``contextlib.suppress(Stop)`` (see
# :func:`each_pass`): GPTQ ends a pass once it has what it needs.
Calibrate = Callable[[], None]
# Sums a tensor over the job's processes (identity on one): every rank must make the same codes.
Reduce = Callable[[torch.Tensor], torch.Tensor]


class Stop(Exception):
    """Raised inside a calibration pass once what is measured has run: the rest is not needed."""


def each_pass(forward: Callable[[Any], Any], batches: Iterable[Any]) -> None:
    """``forward`` on each batch without gradients, a pass :class:`Stop` ends early ended there."""
    with torch.no_grad():
        for b in batches:
            with contextlib.suppress(Stop):
                forward(b)


@contextlib.contextmanager
def quantized_in_place(model: torch.nn.Module, scheme: Scheme, calibrate: Calibrate | None = None,
                       spill: Path | None = None, into: Path | None = None, again: Quantized | None = None,
                       reduce: Reduce | None = None) -> Iterator[Quantized]:
    """The model with every target's weight replaced by its dequantized codes, one block of
    layers at a time: round to nearest, or GPTQ's error compensation when ``calibrate`` is given
    (:func:`made`). The dense weights are spilled to a file a layer and put back on exit, so no
    second copy of the model is held in memory. The codes stay on disk while the context lasts —
    in ``into`` when given, where they outlive it; ``again``: codes an earlier call made, put in
    place as they are (GPTQ's depend on the calibration: made once, read again)."""
    check(model, scheme)
    if into is not None:
        into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=spill) as tmp:
        quantized = again or Quantized(into or Path(tmp), scheme, "gptq" if calibrate else "rtn")
        saved: list[tuple[torch.nn.Linear, Path]] = []
        layers = ((n, layer, again.codes(n)) for n, layer in targets(model)) if again is not None else \
            made(model, scheme, calibrate, reduce)
        try:
            for name, layer, q in layers:
                path = Path(tmp) / f"dense-{len(saved)}.pt"
                torch.save(layer.weight.detach().cpu(), path)
                saved.append((layer, path))
                if again is None:
                    quantized.put(name, q)
                with torch.no_grad():
                    layer.weight.copy_(q.dequantized(layer.weight.dtype).to(layer.weight.device))
            yield quantized
        finally:
            with torch.no_grad():
                for layer, path in saved:
                    layer.weight.copy_(torch.load(path, weights_only=True))


def made(model: torch.nn.Module, scheme: Scheme, calibrate: Calibrate | None,
         reduce: Reduce | None = None) -> Iterator[tuple[str, torch.nn.Linear, Codes]]:
    """Each target's codes, block after block in the model's order; the caller puts each in place
    before asking for the next, so that GPTQ calibrates a block on inputs that went through the
    blocks quantized before it. A numbered block (``layers.3``) that follows the one before it is
    fed that block's outputs (:class:`Chain`: the calibration batches run through the model once,
    not once a block); any other block is calibrated by running the whole model."""
    chain: Chain | None = None
    for key, block in blocks(model):
        hessians: dict[str, torch.Tensor] = {}
        if calibrate is not None:
            if chain is None or not chain.to(key):
                chain = Chain.start(model, key, calibrate)
            hessians = chain.hessians(block) if chain is not None else input_hessians(block, calibrate)
            if reduce is not None:  # summed over ranks: a common factor, which GPTQ's result ignores
                hessians = {n: reduce(h) for n, h in hessians.items()}
        for name, layer in block:
            h = hessians.get(name)
            yield name, layer, gptq(name, layer.weight, h, scheme) if h is not None else quantize(name, layer.weight, scheme)


def blocks(model: torch.nn.Module) -> list[tuple[str, list[tuple[str, torch.nn.Linear]]]]:
    """The targets grouped by the repeated block that holds them (``layers.3``, ``h.3`` …) and
    that block's path, in the model's order; a target outside any is a block of its own."""
    out: dict[str, list[tuple[str, torch.nn.Linear]]] = {}
    for name, layer in targets(model):
        parts = name.split(".")
        cut = next((i + 1 for i, p in enumerate(parts) if p.isdigit()), len(parts))
        out.setdefault(".".join(parts[:cut]), []).append((name, layer))
    return list(out.items())


def numbered(key: str) -> tuple[str, int] | None:
    """A numbered block's parent path and number (``model.layers.3`` → (``model.layers``, 3))."""
    parent, _, last = key.rpartition(".")
    return (parent, int(last)) if last.isdigit() else None


class Chain:
    """The calibration inputs of a numbered block, captured once from the whole model's passes
    and carried from block to block by running each block alone: its outputs are the next one's
    inputs, as in the model's own loop over its layers."""

    def __init__(self, model: torch.nn.Module, key: str, inputs: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
        self.model, self.key, self.inputs = model, key, inputs

    @classmethod
    def start(cls, model: torch.nn.Module, key: str, calibrate: Calibrate) -> Chain | None:
        """The inputs of block ``key`` on every calibration pass (each pass stopped there);
        None when ``key`` is no numbered block or no pass reached it."""
        if numbered(key) is None:
            return None
        inputs: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

        def capture(_: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            inputs.append((args, no_cache(kwargs)))
            raise Stop

        handle = model.get_submodule(key).register_forward_pre_hook(capture, with_kwargs=True)
        try:
            calibrate()
        finally:
            handle.remove()
        return cls(model, key, inputs) if inputs else None

    def to(self, key: str) -> bool:
        """The inputs brought to block ``key`` when it is the one they are at or the next (same
        parent, next number: the current block's outputs, its layers as they are now); whether so."""
        here, there = numbered(self.key), numbered(key)
        if key == self.key:
            return True
        if here is None or there is None or (here[0], here[1] + 1) != there:
            return False
        moved = []
        for (args, kwargs), out in zip(self.inputs, self.run()):
            hidden = out[0] if isinstance(out, (tuple, list)) else out
            moved.append(((hidden, *args[1:]), kwargs) if args else ((), {**kwargs, "hidden_states": hidden}))
        self.key, self.inputs = key, moved
        return True

    def run(self) -> list[Any]:
        """The block's outputs on each input, without gradients."""
        block = self.model.get_submodule(self.key)
        with torch.no_grad():
            return [block(*args, **kwargs) for args, kwargs in self.inputs]

    def hessians(self, layers: list[tuple[str, torch.nn.Linear]]) -> dict[str, torch.Tensor]:
        """Each of the block's layers' ``2 X^T X / n`` over the inputs it sees (GPTQ's Hessian of
        the layer's squared error)."""
        with Hessians(layers) as h:
            self.run()
        return h.result()


def no_cache(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A block's keyword inputs without the generation cache it would append to on every replay
    (any value with ``get_seq_length``; transformers 5 names it ``cache`` or ``past_key_values``)."""
    out = {k: v for k, v in kwargs.items() if not hasattr(v, "get_seq_length")}
    if "use_cache" in out:
        out["use_cache"] = False
    return out


class Hessians:
    """Sums of ``X^T X`` of each layer's inputs while the context lasts (forward hooks)."""

    def __init__(self, layers: list[tuple[str, torch.nn.Linear]]) -> None:
        self.layers = layers
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}
        self.handles: list[Any] = []

    def hook(self, name: str) -> Callable[..., None]:
        def record(_: torch.nn.Module, inputs: tuple[torch.Tensor, ...], __: Any) -> None:
            x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).float()
            if name not in self.sums:
                self.sums[name] = torch.zeros(x.shape[1], x.shape[1], device=x.device)
                self.counts[name] = 0
            self.sums[name].addmm_(x.T, x)
            self.counts[name] += x.shape[0]
        return record

    def __enter__(self) -> Hessians:
        self.handles = [layer.register_forward_hook(self.hook(name)) for name, layer in self.layers]
        return self

    def __exit__(self, *_: Any) -> None:
        for h in self.handles:
            h.remove()

    def result(self) -> dict[str, torch.Tensor]:
        return {n: 2 * s / max(1, self.counts[n]) for n, s in self.sums.items()}


def input_hessians(block: list[tuple[str, torch.nn.Linear]], calibrate: Calibrate) -> dict[str, torch.Tensor]:
    """The block's layers' Hessians from whole passes of the model, each stopped once the
    block's last layer has run."""
    last = block[-1][1]

    def stop(*_: Any) -> None:
        raise Stop

    with Hessians(block) as h:
        handle = last.register_forward_hook(stop)
        try:
            calibrate()
        finally:
            handle.remove()
    return h.result()


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
