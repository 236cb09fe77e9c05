"""A LoRA fine-tune's adapters folded into the weights they adapt once main is over — the Burn
engine's rule (``contrai-train``'s ``lora.rs``): contraction prunes weights by masks, and a mask on
a frozen base would be refilled by its adapter's ``scale · B·A``; the merged weights are pruned and
fine-tuned instead.

In place, on the model the framework trains (a large model has no room for a second copy): each
PEFT LoRA layer merges its own adapters into its base weight (PEFT's ``merge``), and from then on
computes its base alone. The names here are the model's own, without PEFT's: a base layer's
weight is named as the merged model writes it (``…q_proj.weight``, not ``…q_proj.base_layer.weight``),
and adapter matrices are no weights of the model (never pruned, never exported).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

BASE = ".base_layer"
# PEFT's prefix before the model it wraps (``PeftModel.base_model.model``).
PEFT_PREFIX = "base_model.model."


def plain(name: str) -> str:
    """A parameter's name without PEFT's base-layer level (``…q_proj.base_layer.weight`` →
    ``…q_proj.weight``)."""
    return name.replace(BASE + ".", ".")


def is_adapter(name: str) -> bool:
    """Whether a parameter is a PEFT adapter's (``lora_A``, ``lora_B``, ``lora_magnitude_vector`` …)."""
    return any(part.startswith("lora_") for part in name.split("."))


def lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    """PEFT's LoRA layers in ``model``, by module path (none without PEFT installed)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return
    for name, m in model.named_modules():
        if isinstance(m, LoraLayer):
            yield name, m


def is_peft_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` is PEFT's wrapper (``PeftModel``) — not a model it unloaded, which PEFT
    before 0.20 leaves holding its ``peft_config``."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def merged(model: torch.nn.Module) -> bool:
    """Whether the model's LoRA layers hold their adapters merged."""
    return any(layer.merged for _, layer in lora_layers(model))


def adapted_weights(model: torch.nn.Module) -> list[str]:
    """The weights the model's LoRA layers adapt, as :func:`plain` names them."""
    return [plain(f"{path}{BASE}.weight") for path, _ in lora_layers(model)]


def merge(model: torch.nn.Module) -> None:
    """Every LoRA layer's adapters merged into its base weight, in place."""
    for _, layer in lora_layers(model):
        if not layer.merged:
            layer.merge()


def mark_merged(model: torch.nn.Module) -> None:
    """The layers marked as holding their active adapters merged, their base weights untouched:
    the weights were loaded merged (a framework checkpoint written past the merge holds them so)."""
    for _, layer in lora_layers(model):
        layer.merged_adapters = list(layer.active_adapters)


def split(model: torch.nn.Module) -> None:
    """The layers marked as holding their adapters apart, their base weights untouched: the
    caller puts back the values from before the merge (a restore to a checkpoint written before it)."""
    for _, layer in lora_layers(model):
        layer.merged_adapters = []


def fit_scheduler(scheduler: Any, groups: int) -> None:
    """An LR scheduler's per-group lists (``base_lrs``, a ``LambdaLR``'s ``lr_lambdas``, the last
    LRs) made ``groups`` long after the optimizer gained or lost groups: a new group is scheduled
    as the first (torch steps the lists and the groups in lockstep; the conductor sets every
    group's LR before each step anyway)."""
    for attr in ("base_lrs", "lr_lambdas", "_last_lr"):
        values = getattr(scheduler, attr, None)
        if isinstance(values, list) and values:
            values[:] = values[:groups] + [values[0]] * (groups - len(values))


def unloaded(model: torch.nn.Module) -> torch.nn.Module:
    """The model a PEFT model with merged adapters wraps, its LoRA layers replaced by their base
    layers in place (the PEFT wrapper goes on computing the same): what is exported, quantized
    and served. Any other model is itself (a PEFT model whose adapters are not merged exports
    its adapters)."""
    if not is_peft_model(model) or not merged(model):
        return model
    base: torch.nn.Module = getattr(model, "base_model").unload()
    return base


def unprefixed(name: str) -> str:
    """A name of the PEFT-wrapped model as the model inside names it."""
    return name[len(PEFT_PREFIX):] if name.startswith(PEFT_PREFIX) else name
