"""A LoRA job's adapters merged when the conductor says (``MergeAdapters``: past main) and split for a rollback
before it, as the Burn engine's ``lora.rs``."""

from __future__ import annotations

from typing import Any, Callable

import torch

from contrai import _core
from contrai.engine.adapters import adapted_weights, fit_scheduler, merge, merged, split
from contrai.engine.checkpoints import Checkpoints
from contrai.engine.job import Job, distributed
from contrai.engine.masks import matrices
from contrai.engine.model import tuning, unwrap

# The key that marks the optimizer parameter group of a LoRA job's merged weights (a saved
# optimizer state keeps it).
MERGED = "contrai_merged"


class Merging:
    """The :class:`~contrai.engine.Engine`'s LoRA adapters merged and split. The engine's
    attributes and methods they use are declared here."""

    job: Job
    leader: bool
    recipe_toml: str
    recipe_path: str
    checkpoints: Checkpoints
    substitute: Callable[[str, str, dict[str, Any]], None]

    def merge_adapters(self) -> None:
        """A LoRA job's adapters merged into the weights they adapt (``contrai.engine.adapters``), once;
        from then on the merged matrices and those the recipe prunes train (optimizer state for
        them alone: a large model's other weights stay frozen). Their values before are kept
        (``Checkpoints.keep_originals``): a rollback to main's checkpoints needs them back. Under
        DDP the adapters stay apart (recorded): DDP syncs only what trained when it wrapped the model."""
        model = getattr(self.job, "model", None)  # a job may hold no model (the engine's own tests)
        if model is None or tuning(unwrap(model)) != "lora" or merged(unwrap(model)):
            return
        model = unwrap(model)
        if distributed(self.job.world):
            self.substitute("merge the LoRA adapters when main ends",
                            "kept apart: DDP syncs the gradients of what trained when it wrapped the model, and "
                            "the merged weights were frozen then; pruned base weights can be refilled by their "
                            "adapters", {"world": self.job.world})
            return
        trains = trained_past_merge(model, self.recipe_toml, self.recipe_path)
        if self.leader:
            self.checkpoints.keep_originals(model, trains)
        merge(model)
        added = train_also(model, self.job.optimizer, self.job.schedulers(), trains)
        if self.leader:
            print(f"[contrai] LoRA: {len(adapted_weights(model))} adapted weights merged; {added} weight matrices "
                  f"train from here (merged or pruned)")

    def split_adapters(self) -> None:
        """Undoes :meth:`merge_adapters` before a restore to a checkpoint written before it (main's,
        after a rollback): the merged group leaves the optimizer, its matrices freeze again, and
        the layers hold their adapters apart — the restore puts back the base weights' values from
        before the merge (their originals) and the checkpoint's adapters and optimizer."""
        model = unwrap(self.job.model)
        opt = self.job.optimizer
        if opt is not None:
            for group in [g for g in opt.param_groups if g.get(MERGED)]:
                for w in group["params"]:
                    opt.state.pop(w, None)
                    w.requires_grad_(False)
            opt.param_groups[:] = [g for g in opt.param_groups if not g.get(MERGED)]
            fit_schedulers(opt, self.job.schedulers())
        split(model)


def trained_past_merge(model: torch.nn.Module, recipe_toml: str, recipe_path: str) -> list[str]:
    """The matrices a LoRA job trains past main, in the order their optimizer group holds them:
    those its LoRA layers adapt, then those the recipe prunes (``_core.pruned_weights``)."""
    pruned = _core.pruned_weights(recipe_toml, recipe_path, [n for n, _ in matrices(model)])
    return list(dict.fromkeys(adapted_weights(model) + pruned))


def train_also(model: torch.nn.Module, optimizer: Any, schedulers: list[Any], names: list[str]) -> int:
    """The frozen matrices among ``names`` made trainable, in one new optimizer parameter group
    (marked ``MERGED``) with the first group's LR and weight decay, the schedulers fitted to it;
    how many."""
    params = dict(matrices(model))
    new = [params[n] for n in names if n in params and not params[n].requires_grad]
    for w in new:
        w.requires_grad_(True)
    if optimizer is not None and new:
        first = optimizer.param_groups[0]
        optimizer.add_param_group({"params": new, "lr": first["lr"], "weight_decay": first.get("weight_decay", 0.0),
                                   MERGED: True})
        fit_schedulers(optimizer, schedulers)
    return len(new)


def fit_schedulers(optimizer: Any, schedulers: list[Any]) -> None:
    """LR schedulers fitted to the optimizer's parameter groups (``fit_scheduler``)."""
    if optimizer is not None:
        for s in schedulers:
            fit_scheduler(s, len(optimizer.param_groups))
