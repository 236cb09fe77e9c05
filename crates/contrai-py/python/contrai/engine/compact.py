"""Pruned feed-forward units removed from an exported Hugging Face model: smaller matrices and a
config that says so, so the exported model is smaller and faster, not only sparser.

A Hugging Face config holds one ``intermediate_size`` for every layer, so every layer loses as
many units as the layer that lost the fewest, and the size left is rounded up to a multiple of
:data:`ALIGN`; the rest of the pruned units (and attention heads, which transformers 5 no longer
prunes) stay as zeros, and the engine records it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from contrai.engine.adapters import is_peft_model, unprefixed
from contrai.engine.masks import Masks, matrices, members

# The intermediate size left is a multiple of this: an odd size costs more than the units it
# saves (MiniLM-L6 on a 2-core AVX2 CPU, batch 32 × 128 tokens: 1,383 units ran at 1.04× the
# dense 1,536 — 1,384 at 0.93×; 16 floats fill an AVX-512 register), and GGUF's Q8_0 / Q4_0 and
# an int4 group of 32 need whole blocks of 32 in the down projection's rows (a cut to 1,392
# units left SmolLM2 unservable by llama.cpp).
ALIGN = 32


def kept_units(state: Mapping[str, torch.Tensor], keep: Mapping[str, torch.Tensor],
               units: Mapping[str, tuple[str, int, str]]) -> dict[str, torch.Tensor]:
    """Each feed-forward layer's kept units (over its expansion's rows), by expansion path; every
    expansion of the state is listed (one never pruned keeps all). ``units``: the state's
    matrices in units, as :func:`~contrai.engine.masks.members` gives them."""
    out: dict[str, torch.Tensor] = {}
    for path, t in state.items():
        if t.dim() == 2 and path in units and units[path][0] == path:
            k = keep.get(path)
            out[path] = k.cpu().any(dim=1) if k is not None else torch.ones(t.shape[0], dtype=torch.bool)
    return out


@dataclass
class Cut:
    """Which units each feed-forward layer keeps once the pruned ones are cut out."""

    # the rows each expansion keeps (by its path, as :func:`~contrai.engine.masks.members` keys the layer's units)
    index: dict[str, torch.Tensor]
    # intermediate_size before and after
    before: int
    after: int
    # pruned units left as zeros (layers that lost more than the fewest)
    left: int
    # the model's matrices in units (:func:`~contrai.engine.masks.members`), worked out once
    units: dict[str, tuple[str, int, str]]

    def of(self, path: str, t: torch.Tensor) -> torch.Tensor:
        """``t`` — the weight, mask or expansion bias at ``path`` — with the cut units taken out;
        ``t`` itself where the cut does not reach."""
        bias = path.endswith(".bias")
        weight = path[: -len("bias")] + "weight" if bias else path
        g = self.units.get(weight)
        if g is None or g[0] not in self.index or (bias and g[1] != 0) or t.dim() != (1 if bias else 2):
            return t
        return t.index_select(0 if bias else g[1], self.index[g[0]].to(t.device))


def units_removed(model: torch.nn.Module, masks: Masks) -> Cut | str | None:
    """The cut of the model's pruned units — the same number from every layer —, or why none can
    be, or None when no unit was pruned whole. ``masks`` may name the weights as a PEFT model
    around ``model`` does (``contrai.engine.adapters.unloaded``)."""
    size = getattr(getattr(model, "config", None), "intermediate_size", None)
    peft = is_peft_model(model)
    keep = masks.keep if peft else {unprefixed(k): v for k, v in masks.keep.items()}
    state = dict(matrices(model)) if peft else model.state_dict()
    units = members(state, heads=False, units=True)
    kept = kept_units(state, keep, units)
    dead = {path: (~k).nonzero().flatten() for path, k in kept.items()}
    if not any(len(d) for d in dead.values()):
        return None
    if peft:
        return ("a PEFT model whose adapters are not merged exports its adapters; merge them (merge_and_unload) to "
                "cut the units")
    if not isinstance(size, int) or any(k.numel() != size for k in kept.values()):
        return "the model's config has no intermediate_size matching its feed-forward layers"
    fewest = min(len(d) for d in dead.values())
    cut = size - min(-(-(size - fewest) // ALIGN) * ALIGN, size)
    if cut == 0:
        return (f"a feed-forward layer lost fewer than {ALIGN} whole units, and a Hugging Face config holds one "
                "intermediate_size")
    # Each layer keeps every unit but the first `cut` of its pruned ones.
    index = {}
    for key, d in dead.items():
        keep_rows = torch.ones(size, dtype=torch.bool)
        keep_rows[d[:cut]] = False
        index[key] = keep_rows.nonzero().flatten()
    return Cut(index, size, size - cut, sum(len(d) - cut for d in dead.values()), units)


def cut_in_place(model: torch.nn.Module, cut: Cut, masks: Masks) -> None:
    """The model made smaller in place — each parameter the cut reaches replaced by its kept part,
    the linear layers' sizes and ``config.intermediate_size`` told — and ``masks`` with it: what is
    saved, quantized and served from here on computes what it did, without the cut units."""
    with torch.no_grad():
        for path, p in model.named_parameters():
            small = cut.of(path, p.data)
            if small is not p.data:
                p.data = small
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.out_features, m.in_features = m.weight.shape
    masks.keep = {k: cut.of(unprefixed(k), v) for k, v in masks.keep.items()}
    getattr(model, "config").intermediate_size = cut.after
