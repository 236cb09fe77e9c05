"""Pruning masks on a PyTorch model, set to the conductor's targets by weight magnitude and applied
after every optimizer step, so that pruned weights stay exactly zero. Which entries and groups go
is decided in Rust by the rule the Burn engine calls too (``contrai_lifecycle::select`` through
``_core.magnitude_masks`` and ``_core.weakest_groups``): the same scores and targets give the same
masks, bit for bit (``tests/test_masks.py`` holds this engine to the Burn engine's masks). This
module does the tensor work: scores, norms, layouts and names.

Asked for whole structures, masks take them whole (the Burn engine's rule, in PyTorch's
``[out, in]`` layout): an attention head of the BERT family — its rows of query, key and value
with its columns of the output projection — and a feed-forward unit — its row of the expansion
(BERT's ``intermediate.dense``, Llama's ``up_proj`` with ``gate_proj``) with its column of the
projection (``output.dense``, ``down_proj``), scored by L2 norm, the weakest first.

Which matrices, how far and when is the conductor's (``contrai_lifecycle::prune_policy``); module names
come from the same rule (``_core.module_of``).
"""

from __future__ import annotations

from typing import Any, Callable, Container, Iterable, Iterator, Mapping

import torch

from contrai import _core
from contrai.engine.adapters import is_adapter, plain


def matrices(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """The model's weight matrices (2-D parameters) by path, in its order; in a PEFT model, a base
    layer's under its plain name and no adapter's (adapters are no weights of the model: a recipe's
    globs name the model's own, and masks never touch an adapter)."""
    for name, p in model.named_parameters():
        if p.dim() == 2 and not is_adapter(name):
            yield plain(name), p


def head_count(model: torch.nn.Module) -> int | None:
    """Attention heads a layer, when the model's config says."""
    cfg = getattr(model, "config", None)
    for a in ("num_attention_heads", "n_head", "num_heads"):
        v = getattr(cfg, a, None) if cfg is not None else None
        if isinstance(v, int):
            return v
    return None


class Masks:
    """Keep-masks of the pruned weight matrices, by parameter path."""

    def __init__(self) -> None:
        self.keep: dict[str, torch.Tensor] = {}

    def empty(self) -> bool:
        return not self.keep

    def update(self, model: torch.nn.Module, order: dict[str, Any],
               inputs: Mapping[str, torch.Tensor] | None = None) -> set[str]:
        """Masks every matrix of ``order["targets"]`` (path → ``{"sparsity", "cap"}``) to its
        module's share: whole heads (``order["heads"]``) and units (``order["units"]``) where
        asked and the model's names show them, the rest by magnitude within each module or under
        one global threshold with the modules' caps; pruned weights stay pruned. ``inputs``: the
        units' summed squared inputs to their projection (:func:`unit_inputs`), by structure; a
        structure with them is scored by what each unit adds to the projection's output. Returns
        the structures pruned whole (``"heads"``, ``"units"``)."""
        params = dict(matrices(model))
        heads = order.get("heads")
        whole = self.update_groups(params, order["targets"], heads, bool(order.get("units")), inputs or {})
        grouped = {path for paths in whole.values() for path in paths}

        def single(path: str) -> bool:
            # Attention goes by whole heads when the model's names show them; otherwise (recorded
            # by the engine) by single weights.
            by_heads = bool(whole["heads"]) and _core.is_attention(_core.module_of(path))
            return path in params and path not in grouped and not by_heads

        pools: dict[str, list[str]] = {}
        for path in order["targets"]:
            if single(path):
                pools.setdefault(_core.module_of(path), []).append(path)
        modules = list(pools)
        scores = [self.scores(params, pools[m]) for m in modules]
        asked = [(s.numpy().astype("<f4").tobytes(), *target_of(order["targets"][pools[m][0]]))
                 for m, s in zip(modules, scores)]
        for m, keep in zip(modules, _core.magnitude_masks(asked, order["scope"])):
            flags = torch.frombuffer(bytearray(keep), dtype=torch.bool)
            offset = 0
            for path in pools[m]:
                n = params[path].numel()
                self.keep[path] = flags[offset:offset + n].view(params[path].shape).clone()
                offset += n
        return {kind for kind, paths in whole.items() if paths}

    def update_groups(self, params: Mapping[str, torch.Tensor], targets: dict[str, Any], heads: int | None,
                      units: bool, inputs: Mapping[str, torch.Tensor]) -> dict[str, set[str]]:
        """Whole heads and units: in each targeted structure the ``floor(share × groups)`` groups
        with the smallest score are masked (groups masked before first). The score: the squared
        L2 norm over all the group's matrices; for units whose ``inputs`` are known, the
        squared norm of what each adds to the projection's output (its summed squared input times
        its projection column's squared norm) — weight norms alone miss the scale of the
        activations, and cut a pretrained LLM's critical units first (SmolLM2-135M, 10 % of
        every layer's units: e-mail loss 4.10 → 8.85 by weight norm, → 4.25 by output). Returns
        the paths masked this way, by structure."""
        groups_of: dict[str, list[tuple[str, int]]] = {}
        kinds: dict[str, str] = {}
        for path, (key, axis, kind) in members(params, heads is not None, units).items():
            if key in targets and key in params:
                groups_of.setdefault(key, []).append((path, axis))
                kinds[key] = kind
        done: dict[str, set[str]] = {"heads": set(), "units": set()}
        for key, ms in groups_of.items():
            kind = kinds[key]
            groups = heads if kind == "heads" else params[key].shape[0]
            if not groups or any(params[p].shape[axis] % groups for p, axis in ms):
                continue
            norm = torch.zeros(groups, dtype=torch.float64)
            dead = torch.ones(groups, dtype=torch.bool)
            seen = inputs.get(key) if kind == "units" else None
            for path, axis in ms:
                w = params[path].detach().double().cpu()
                if seen is None:
                    norm += (w * w).sum(dim=1 - axis).view(groups, -1).sum(1)
                elif axis == 1:
                    norm += (w * w).sum(dim=0) * seen.double().cpu()
                keep = self.keep.get(path)
                if keep is None:
                    dead[:] = False
                else:
                    dead &= ~keep.cpu().any(dim=1 - axis).view(groups, -1).any(1)
            pruned = _core.weakest_groups(norm.tolist(), dead.tolist(), *target_of(targets[key]))
            kept = ~torch.tensor(pruned, dtype=torch.bool)
            for path, axis in ms:
                shape = params[path].shape
                along = kept.repeat_interleave(shape[axis] // groups)
                flags = along.view(-1, 1) if axis == 0 else along.view(1, -1)
                self.keep[path] = flags.expand(shape).clone()
                done[kind].add(path)
        return done

    def prune_modules(self, model: torch.nn.Module, sparsity: dict[str, float], heads: int | None,
                      units: bool) -> set[str]:
        """Masks each module of ``sparsity`` to its share, uncapped (diagnose's measurements);
        the structures pruned whole."""
        targets = {path: {"sparsity": sparsity[_core.module_of(path)], "cap": 1.0}
                   for path, _ in matrices(model) if _core.module_of(path) in sparsity}
        return self.update(model, {"targets": targets, "scope": "module", "heads": heads, "units": units})

    def scores(self, params: Mapping[str, torch.Tensor], paths: list[str]) -> torch.Tensor:
        """Magnitudes of a module's entries, masked ones −1 (never revived)."""
        parts = []
        for path in paths:
            s = params[path].detach().abs().flatten().float().cpu()
            keep = self.keep.get(path)
            if keep is not None:
                s = torch.where(keep.flatten().cpu(), s, torch.full_like(s, -1.0))
            parts.append(s)
        return torch.cat(parts)

    def apply(self, model: torch.nn.Module) -> None:
        """Pruned entries back to zero."""
        if not self.keep:
            return
        params = dict(matrices(model))
        with torch.no_grad():
            for path, keep in self.keep.items():
                p = params.get(path)
                if p is None:
                    continue
                if keep.device != p.device:
                    # Moved once, not at every optimizer step.
                    keep = self.keep[path] = keep.to(p.device)
                p.masked_fill_(~keep, 0)

    def by_module(self) -> dict[str, float]:
        """Share of zeros of each masked module."""
        acc: dict[str, list[int]] = {}
        for path, keep in self.keep.items():
            a = acc.setdefault(_core.module_of(path), [0, 0])
            a[0] += keep.numel() - int(keep.sum())
            a[1] += keep.numel()
        return {m: z / n for m, (z, n) in sorted(acc.items()) if n}

    def overall(self) -> float:
        z = sum(k.numel() - int(k.sum()) for k in self.keep.values())
        n = sum(k.numel() for k in self.keep.values())
        return z / n if n else 0.0

    def save(self, path: str) -> None:
        torch.save({k: v.cpu() for k, v in self.keep.items()}, path)

    @staticmethod
    def load(path: str) -> "Masks":
        m = Masks()
        m.keep = torch.load(path, map_location="cpu", weights_only=True)
        return m


def members(paths: Iterable[str], heads: bool, units: bool) -> dict[str, tuple[str, int, str]]:
    """How each of ``paths`` is pruned whole (heads when ``heads``, units when ``units``): the path
    whose target decides its groups, the axis they lie along (0: rows, PyTorch's output features;
    1: columns, its input features) and the structure (``"heads"`` or ``"units"``) — the rule
    the Burn engine uses too (``contrai_lifecycle::prune_policy::member_of``). Paths in none are left out."""
    return {path: (key, 1 if by_inputs else 0, kind)
            for path, (key, by_inputs, kind) in _core.whole_members(list(paths), heads, units).items()}


def projections(model: torch.nn.Module) -> dict[str, str]:
    """The module projecting each feed-forward layer's units back (``down_proj``, BERT's
    ``output.dense``), by the path that keys its units (:func:`members`)."""
    paths = [path for path, _ in matrices(model)]
    return {key: path[: -len(".weight")] for path, (key, axis, _) in members(paths, False, True).items() if axis == 1}


def unit_inputs(model: torch.nn.Module, forward: Callable[[], None], keys: Container[str]) -> dict[str, torch.Tensor]:
    """Each projection's squared input a unit, summed over the batches ``forward`` runs the model on,
    by its structure's key (:func:`projections`) among ``keys``, on the CPU in float64; nothing
    (``forward`` not run) when no projection's key is among them."""
    where = {k: m for k, m in projections(model).items() if k in keys}
    sums: dict[str, torch.Tensor] = {}
    if not where:
        return sums

    def hook(key: str) -> Callable[..., None]:
        def add(_m: torch.nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0].detach().double()
            sums[key] = sums.get(key, 0) + x.pow(2).reshape(-1, x.shape[-1]).sum(0).cpu()
        return add

    handles = [model.get_submodule(path).register_forward_pre_hook(hook(key)) for key, path in where.items()]
    try:
        forward()
    finally:
        for h in handles:
            h.remove()
    return sums


def target_of(target: dict[str, float]) -> tuple[float, float]:
    """A target's sparsity and cap, as the selection rule takes them."""
    return float(target["sparsity"]), float(target["cap"])
