"""Pruning masks on a PyTorch model, set to the conductor's targets by weight magnitude and applied
after every optimizer step, so that pruned weights stay exactly zero (the Burn engine's
semantics: the same targets give the same masks).

Which matrices, how far and when is the conductor's (``contrai_lifecycle::prune``); module names
come from the same rule (``_core.module_of``).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from . import _core


def matrices(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """The model's weight matrices (2-D parameters) by path, in its order."""
    for name, p in model.named_parameters():
        if p.dim() == 2:
            yield name, p


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

    def update(self, model: torch.nn.Module, order: dict[str, Any]) -> None:
        """Masks every matrix of ``order["targets"]`` (path → ``{"sparsity", "cap"}``) to its
        module's share, by magnitude within each module or under one global threshold with the
        modules' caps; pruned weights stay pruned."""
        params = dict(matrices(model))
        pools: dict[str, list[str]] = {}
        for path in order["targets"]:
            if path in params:
                pools.setdefault(_core.module_of(path), []).append(path)
        targets = {m: order["targets"][paths[0]] for m, paths in pools.items()}
        scores = {m: self.scores(params, paths) for m, paths in pools.items()}
        if order["scope"] == "global":
            thresholds = global_thresholds(scores, targets)
        else:
            thresholds = {m: kth(s, count(s, share(targets[m]))) for m, s in scores.items()}
        for m, paths in pools.items():
            offset = 0
            for path in paths:
                n = params[path].numel()
                s = scores[m][offset:offset + n]
                offset += n
                self.keep[path] = ((s >= 0) & (s > thresholds[m])).view(params[path].shape)

    def prune_modules(self, model: torch.nn.Module, sparsity: dict[str, float], heads: int | None) -> None:
        """Masks each module of ``sparsity`` to its share, uncapped (diagnose's copies)."""
        del heads  # whole-head pruning: see Engine (recorded when asked)
        targets = {path: {"sparsity": sparsity[_core.module_of(path)], "cap": 1.0}
                   for path, _ in matrices(model) if _core.module_of(path) in sparsity}
        self.update(model, {"targets": targets, "scope": "module", "heads": None})

    def scores(self, params: dict[str, torch.Tensor], paths: list[str]) -> torch.Tensor:
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
                if p is not None:
                    p.mul_(keep.to(device=p.device, dtype=p.dtype))

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
        m.keep = torch.load(path, map_location="cpu")
        return m


def share(target: dict[str, float]) -> float:
    """The share a target prunes: its sparsity within its cap."""
    return min(max(min(target["sparsity"], target["cap"]), 0.0), 1.0)


def count(scores: torch.Tensor, s: float) -> int:
    """Entries to prune for share ``s`` (never fewer than are masked already)."""
    masked = int((scores < 0).sum())
    return max(int(scores.numel() * s), masked)


def kth(scores: torch.Tensor, k: int) -> float:
    """The ``k``-th smallest score (−inf for k = 0)."""
    k = min(k, scores.numel())
    if k == 0:
        return float("-inf")
    return float(torch.kthvalue(scores, k).values)


def global_thresholds(scores: dict[str, torch.Tensor], targets: dict[str, dict[str, float]]) -> dict[str, float]:
    """Water-filling: one threshold over the free modules removes the total the targets ask for;
    a module it would push past its cap is held at the cap, and the rest is shared again."""
    total = sum(count(scores[m], share(targets[m])) for m in scores)
    held: dict[str, int] = {}
    while True:
        free = [m for m in scores if m not in held]
        k = max(total - sum(held.values()), 0)
        t = kth(torch.cat([scores[m] for m in free]), k) if free else float("-inf")
        over = [m for m in free
                if int((scores[m] <= t).sum()) > count(scores[m], min(targets[m]["cap"], 1.0))]
        if not over:
            out = {m: t for m in free}
            out.update({m: kth(scores[m], c) for m, c in held.items()})
            return out
        for m in over:
            held[m] = count(scores[m], min(targets[m]["cap"], 1.0))
