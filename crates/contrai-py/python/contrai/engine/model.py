"""What the PyTorch engine reads from and sets on a running ``torch.nn.Module``, whatever the
framework: the model inside its wrappers, its device and class names, every dropout
probability it reads, whether it recomputes activations, and how it trains (full or adapters)."""

from __future__ import annotations

import contextlib
from typing import Iterator, TypeVar

import torch

from contrai.protocol import Task, Tuning

M = TypeVar("M", bound=torch.nn.Module)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DDP or compile wrapper."""
    while isinstance(inner := getattr(model, "module", None), torch.nn.Module):
        model = inner
    return getattr(model, "_orig_mod", model)


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """The model in eval mode (no dropout) while the context lasts, then as it was."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def first_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter."""
    return next(model.parameters()).device


def task(model: torch.nn.Module) -> Task:
    """``language_model`` when a module of the model has Hugging Face output embeddings (an LM
    head: a logit a vocabulary entry at every position), else ``classification``."""
    for m in model.modules():
        head = getattr(m, "get_output_embeddings", None)
        if callable(head) and head() is not None:
            return "language_model"
    return "classification"


def class_names(model: torch.nn.Module, classes: int) -> list[str]:
    """The class names the model's config gives (``id2label``), else their indices; none for a
    language model (its config's two default labels name no class it predicts)."""
    if task(model) == "language_model":
        return []
    labels = getattr(getattr(model, "config", None), "id2label", None) or {}
    return [str(labels.get(i, i)) for i in range(classes)]


_DROPOUT_ATTRS = ("dropout_prob", "attention_dropout", "attn_dropout", "dropout_p")
_CONFIG_DROPOUT = ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout",
                   "hidden_dropout", "dropout", "classifier_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop")


def dropout_sites(model: torch.nn.Module) -> Iterator[tuple[str, float]]:
    """Every dropout probability the model reads: ``nn.Dropout`` modules (``name.p``), float
    attributes attention reads at forward time (``name.dropout_prob`` ...), and the config's."""
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            yield f"{name}.p", float(m.p)
        for a in _DROPOUT_ATTRS:
            v = m.__dict__.get(a)
            if isinstance(v, float):
                yield f"{name}.{a}", v
    cfg = getattr(model, "config", None)
    for a in _CONFIG_DROPOUT:
        v = getattr(cfg, a, None) if cfg is not None else None
        if isinstance(v, float):
            yield f"config.{a}", v


def set_dropout(model: torch.nn.Module, values: dict[str, float]) -> None:
    """Sets the dropout probabilities :func:`dropout_sites` named."""
    modules = dict(model.named_modules())
    cfg = getattr(model, "config", None)
    for site, v in values.items():
        owner, attr = site.rsplit(".", 1)
        if owner == "config" and cfg is not None:
            setattr(cfg, attr, v)
        elif owner in modules or owner == "":
            setattr(modules[owner], attr, v)


def recomputes(model: torch.nn.Module) -> bool:
    """Whether gradient checkpointing is on somewhere in ``model``: transformers marks each layer it
    checkpoints (``gradient_checkpointing = True``), whoever turned it on (the Trainer, the user)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def recompute(model: torch.nn.Module) -> bool:
    """Turns non-reentrant gradient checkpointing on in every transformers model inside ``model``
    (itself, the one a PEFT wrapper or a LightningModule holds) that supports it, the KV cache off
    (a causal LM's cache is useless in training and clashes with recomputation); ``False`` when
    there is none. Non-reentrant: frozen embeddings (LoRA) need no input-gradient hook."""
    done = False
    for m in model.modules():
        if not getattr(m, "supports_gradient_checkpointing", False) or recomputes(m):
            continue
        # transformers 5.x names it activation checkpointing (the old name a deprecated alias).
        enable = getattr(m, "activation_checkpointing_enable", None)
        key = "activation_checkpointing_kwargs"
        if not callable(enable):
            enable, key = getattr(m, "gradient_checkpointing_enable", None), "gradient_checkpointing_kwargs"
        if not callable(enable):
            continue
        enable(**{key: {"use_reentrant": False}})
        config = getattr(m, "config", None)
        if getattr(config, "use_cache", None):
            config.use_cache = False  # type: ignore[union-attr]
        done = True
    return done


def tuning(model: torch.nn.Module) -> Tuning:
    """LoRA when PEFT's LoRA layers sit in the model, ``peft`` for another tuner's layers, else
    ``full`` (PEFT's public layer classes; without PEFT installed, ``full``)."""
    try:
        from peft.tuners.lora import LoraLayer
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return "full"
    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    if any(isinstance(m, LoraLayer) for m in layers):
        return "lora"
    return "peft" if layers else "full"
