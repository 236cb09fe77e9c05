"""The engine's measurements of the model (evaluations, diagnose, calibration), as the Burn engine's ``measure.rs``."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

import torch

from contrai import _core
from contrai.engine.card import nan0
from contrai.engine.checkpoints import put_back
from contrai.engine.job import Job, distributed
from contrai.engine.masks import Masks, matrices, unit_inputs
from contrai.engine.model import evaluating, unwrap
from contrai.quant.weights import each_pass

# Training samples whose activations score feed-forward units for pruning and calibrate GPTQ.
CALIBRATION = 64


class Evaluation(Protocol):
    """:meth:`Measuring.evaluation`, as the other parts of the engine call it."""

    def __call__(self, model: torch.nn.Module, batches: Iterable[Any] | None,
                 sharded: bool = True) -> tuple[float, float, int]: ...


class Measuring:
    """The :class:`~contrai.engine.Engine`'s measurements: what the conductor asks of the model
    before it decides. The engine's attributes and methods they use are declared here."""

    job: Job
    leader: bool
    step: int
    substitutes: list[tuple[str, str]]
    metric: Callable[[dict[str, Any]], None]
    substitute: Callable[[str, str, dict[str, Any]], None]

    def evaluation(self, model: torch.nn.Module, batches: Iterable[Any] | None,
                   sharded: bool = True) -> tuple[float, float, int]:
        """Mean loss, accuracy and samples of ``model`` on ``batches`` (summed over ranks when
        each rank holds a shard of them)."""
        if batches is None:
            return math.nan, math.nan, 0
        total, n, correct, counted = 0.0, 0, 0, 0
        with evaluating(model), torch.no_grad():
            for b in batches:
                out = self.job.outputs(model, b)
                total += float(out.losses.sum())
                n += out.losses.numel()
                correct += out.correct
                counted += out.counted
        if sharded:
            sums = self.job.all_reduce([total, n, correct, counted])
            total, n, correct, counted = sums[0], int(sums[1]), int(sums[2]), int(sums[3])
        if n == 0:
            return math.nan, math.nan, 0
        return total / n, (correct / counted if counted else math.nan), int(n)

    def evaluate(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validation loss and accuracy of the model now (a metrics row when ``record`` names a phase)."""
        loss, acc, _ = self.evaluation(self.job.model, self.job.eval_batches())
        if p["record"] is not None:
            self.metric({"step": self.step, "phase": p["record"], "val_loss": loss, "val_accuracy": nan0(acc)})
        return {"Evaluated": {"val_loss": loss, "val_accuracy": nan0(acc)}}

    def check_pipeline(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validate's check: the fresh model overfits one batch (dropout off); its trainable
        weights are put back after (in place: a large model has no room for a copy). Reports the
        trainable parameters no step gave a gradient (a LoRA ``A`` gets its first once ``B`` has
        moved from zero, so every step counts)."""
        model = unwrap(self.job.model)
        named = {n: w for n, w in model.named_parameters() if w.requires_grad}
        trainable: list[torch.Tensor] = list(named.values())
        missing = set(named)
        batch = self.job.train_batch()
        losses = []
        with put_back(trainable), evaluating(model):
            opt = torch.optim.AdamW(trainable, lr=p["lr"])
            for _ in range(p["steps"]):
                opt.zero_grad()
                loss = self.job.outputs(model, batch).losses.mean()
                loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
                missing = {n for n in missing if (g := named[n].grad) is None or not bool(g.any())}
                opt.step()
                losses.append(float(loss.detach()))
                self.step += 1
                self.metric({"step": self.step, "phase": "validate", "validate_loss": losses[-1]})
            del opt
        val, _, _ = self.evaluation(self.job.model, self.job.eval_batches())
        return {"PipelineChecked": {"first_loss": losses[0], "last_loss": losses[-1], "val_loss": val,
                                    "no_gradient": sorted(missing), "losses": losses}}

    def measure_sample_losses(self, _: Any) -> dict[str, Any]:
        """The loss of every training sample under the current model (eval mode), in row order."""
        model = self.job.model
        losses: list[float] = []
        with evaluating(model), torch.no_grad():
            for _, b in self.job.train_rows():
                losses.extend(float(x) for x in self.job.outputs(model, b).losses)
        ds = self.job.train_dataset()
        ids = [str(i) for i in range(len(losses))]
        if ds is not None and hasattr(ds, "ids"):
            ids = [str(x) for x in ds.ids]
        return {"SampleLosses": {"losses": losses, "ids": ids}}

    def measure_sensitivity(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validation loss with each module pruned alone at each level (diagnose's scan), on the
        evenly spread batches ``samples`` asks for, each module's levels stopped after the first
        that costs more than ``stop_above``; the unpruned loss on the same batches with them.
        ``linearized``: every level estimated at once (``linearized``) where the model is a
        classifier; a token model's are measured (recorded)."""
        model = unwrap(self.job.model)
        batches = list(spread_batches(self.job.eval_batches(), p.get("samples")))
        if p.get("linearized"):
            estimated = self.linearized(model, p, batches)
            if estimated is not None:
                return estimated
            self.substitute("estimate each module's pruning sensitivity from logit gradients",
                            "a token model's vocabulary has too many logits to take each one's gradient: "
                            "each module is pruned and evaluated on the same samples instead", {"asked": "diagnose"})
        base, _, _ = self.evaluation(model, batches)
        out: dict[str, list[float]] = {}
        whole: set[str] = set()
        stop = p.get("stop_above")
        for i, module in enumerate(p["modules"]):
            losses: list[float] = []
            for level in p["levels"]:
                losses.append(self.pruned_loss(model, {module: level}, p, whole, batches))
                if stop is not None and (losses[-1] - base) / max(abs(base), 1e-12) > stop:
                    break
            out[module] = losses
            if self.leader:
                rises = ", ".join(f"{100 * lv:.0f} % {100 * (v - base) / max(abs(base), 1e-12):+.1f} %"
                                  for lv, v in zip(p["levels"], losses))
                print(f"[contrai] diagnose: {module} pruned alone: {rises} ({i + 1} of {len(p['modules'])})")
        self.structure_unavailable(p, set(p["modules"]), whole)
        return {"Sensitivity": {"val_loss": out, "base": base}}

    def linearized(self, model: torch.nn.Module, p: dict[str, Any],
                   batches: list[Any]) -> dict[str, Any] | None:
        """Each module's loss at each level estimated as the Burn engine does
        (``measure::linearized``): for each sample alone, the gradient of every logit's margin
        over class 0 times the weights a level removes moves that margin; the cross-entropy of
        the moved logits, averaged (over ranks too), is the level's loss. None for a token model."""
        modules, levels = p["modules"], p["levels"]
        params = dict(matrices(model))
        first: dict[str, torch.Tensor] = {}
        owner: dict[str, int] = {}
        whole: set[str] = set()
        for i, module in enumerate(modules):
            for li in reversed(range(len(levels))):
                m = Masks()
                whole |= m.prune_modules(model, {module: levels[li]}, p.get("heads"), bool(p.get("units")))
                for path, keep in m.keep.items():
                    f = first.setdefault(path, torch.full(keep.shape, math.inf, device=params[path].device))
                    f[~keep.to(f.device)] = li
                    owner[path] = i
        paths = list(first)
        if self.leader:
            print(f"[contrai] diagnose: estimating {len(modules)} modules at {len(levels)} levels from each "
                  "validation sample's logit gradients, one sample at a time")
        sums = torch.zeros(len(modules), len(levels), dtype=torch.float64)
        base, n = 0.0, 0
        was, tracked = model.training, [params[q].requires_grad for q in paths]
        model.eval()
        for q in paths:
            params[q].requires_grad_(True)
        try:
            for one in (x for b in batches for x in single_samples(b)):
                logits, labels = self.job.logits(model, one)
                if logits.dim() != 2:
                    return None
                z, y = logits[0].float(), int(labels[0])
                moves = torch.zeros(len(modules), len(levels), z.numel(), dtype=torch.float64)
                for c in range(1, z.numel()):
                    grads = torch.autograd.grad(z[c] - z[0], [params[q] for q in paths],
                                                retain_graph=c < z.numel() - 1, allow_unused=True)
                    for q, g in zip(paths, grads):
                        if g is not None:
                            prod = (g * params[q].detach()).flatten().double()
                            code = first[q].flatten()
                            for li in range(len(levels)):
                                # Removing w moves the margin by −g·w.
                                moves[owner[q], li, c] -= float(prod[code <= li].sum())
                z0 = z.detach().double().cpu()
                moved = z0 + moves
                sums += torch.logsumexp(moved, -1) - moved[..., y]
                base += float(torch.logsumexp(z0, -1) - z0[y])
                n += 1
        finally:
            model.train(was)
            for q, t in zip(paths, tracked):
                params[q].requires_grad_(t)
        total = self.job.all_reduce([base, float(n), *sums.flatten().tolist()])
        count = max(total[1], 1.0)
        base = total[0] / count
        losses = torch.tensor(total[2:], dtype=torch.float64).view(len(modules), len(levels)) / count
        out = {m: [float(v) for v in losses[i]] for i, m in enumerate(modules)}
        self.structure_unavailable(p, set(modules), whole)
        if self.leader:
            for i, m in enumerate(modules):
                rises = ", ".join(f"{100 * lv:.0f} % {100 * (v - base) / max(abs(base), 1e-12):+.1f} %"
                                  for lv, v in zip(levels, out[m]))
                print(f"[contrai] diagnose: {m} pruned alone, estimated on {int(count)} validation samples: "
                      f"{rises} ({i + 1} of {len(modules)})")
        return {"Sensitivity": {"val_loss": out, "base": base}}

    def measure_joint(self, p: dict[str, Any]) -> dict[str, Any]:
        """Validation loss with every module pruned at once to the proposed sparsity (on the
        evenly spread batches ``samples`` asks for, all when None)."""
        whole: set[str] = set()
        batches = spread_batches(self.job.eval_batches(), p.get("samples"))
        loss = self.pruned_loss(unwrap(self.job.model), p["sparsity"], p, whole, batches)
        self.structure_unavailable(p, set(p["sparsity"]), whole)
        return {"JointLoss": {"val_loss": loss}}

    def pruned_loss(self, model: torch.nn.Module, sparsity: dict[str, float], asked: dict[str, Any],
                    whole: set[str], batches: Iterable[Any]) -> float:
        """Loss of ``model`` on ``batches`` with ``sparsity`` applied (whole heads and units where
        ``asked`` and shown), the pruned matrices put back after; ``whole`` gains the structures
        pruned whole."""
        m = Masks()
        whole |= m.prune_modules(model, sparsity, asked.get("heads"), bool(asked.get("units")))
        params = dict(matrices(model))
        with put_back([params[path] for path in m.keep]):
            m.apply(model)
            loss, _, _ = self.evaluation(model, batches)
        return loss

    def structure_unavailable(self, asked: dict[str, Any], modules: set[str], whole: set[str]) -> None:
        """Whole heads or units asked for ``modules`` that the model's names do not show (heads:
        the BERT family's; units: BERT's and Llama's feed-forward layers): recorded once each,
        single weights pruned instead."""
        attention = any(_core.is_attention(m) for m in modules)
        wanted = [
            ("prune whole attention heads", "attention", "contract.prune_heads",
             asked.get("heads") is not None and attention and "heads" not in whole),
            ("prune whole feed-forward units", "feed-forward layers", "contract.prune_units",
             bool(asked.get("units")) and any(not _core.is_attention(m) for m in modules) and "units" not in whole),
        ]
        for what, where, key, on in wanted:
            if on and not any(w.startswith(what) for w, _ in self.substitutes):
                self.substitute(what, f"the PyTorch engine prunes {where} by single-weight magnitude instead "
                                "(the model's parameter names do not show them)", {"asked": key})

    def unit_inputs(self, model: torch.nn.Module, order: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The targeted feed-forward units' squared inputs to their projections over the first
        ``CALIBRATION`` training samples (summed over ranks: every rank prunes alike), what whole
        units are scored by (``Masks.update_groups``)."""

        def forward() -> None:
            with evaluating(model), torch.no_grad():
                for b in self.calibration_batches():
                    self.job.outputs(self.job.model, b)

        sums = unit_inputs(model, forward, order["targets"])
        keys = list(sums)
        if not keys:
            return {}
        flat = torch.tensor(self.job.all_reduce(torch.cat([sums[k] for k in keys]).tolist()), dtype=torch.float64)
        return dict(zip(keys, torch.split(flat, [sums[k].numel() for k in keys])))

    def calibration_batches(self) -> Iterator[Any]:
        """The batches of the first ``CALIBRATION`` training samples, in row order: what whole units
        are scored on and GPTQ's Hessians measured on."""
        seen = 0
        for rows, b in self.job.train_rows():
            yield b
            seen += len(rows)
            if seen >= CALIBRATION:
                return

    def calibrate(self) -> None:
        """The job's model run on the calibration batches in eval mode (GPTQ's ``Calibrate``)."""
        with evaluating(unwrap(self.job.model)):
            each_pass(lambda b: self.job.logits(self.job.model, b), self.calibration_batches())

    def summed(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` summed over the job's ranks, in place."""
        if distributed(self.job.world):
            torch.distributed.all_reduce(t)
        return t


def single_samples(batch: Any) -> Iterator[Any]:
    """Each sample of a batch as a batch of one: every tensor with the batch's first dimension
    sliced, dicts, lists and tuples rebuilt around them, anything else as it is."""
    def size(x: Any) -> int | None:
        if isinstance(x, torch.Tensor):
            return x.shape[0] if x.dim() > 0 else None
        items = x.values() if isinstance(x, Mapping) else x if isinstance(x, (list, tuple)) else ()
        return next((s for s in map(size, items) if s is not None), None)

    def take(x: Any, i: int) -> Any:
        if isinstance(x, torch.Tensor):
            return x[i:i + 1] if x.dim() > 0 else x
        if isinstance(x, Mapping):
            return {k: take(v, i) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(take(v, i) for v in x) if type(x) in (list, tuple) else type(x)(*(take(v, i) for v in x))
        return x

    for i in range(size(batch) or 0):
        yield take(batch, i)


def spread_batches(loader: Iterable[Any], samples: int | None) -> Iterable[Any]:
    """Batches of ``loader`` holding about ``samples`` samples, evenly spread over it (a fixed
    subsample: the same batches at every call); all of it when ``samples`` is None or not fewer
    than it holds, or when its length or batch size is unknown. A loader built on a batch
    sampler (accelerate's, in a Trainer) has its batch size there."""
    size = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    try:
        count = len(loader)  # type: ignore[arg-type]
    except TypeError:
        return loader
    if samples is None or not size or count == 0:
        return loader
    keep = max(1, -(-samples // size))
    if keep >= count:
        return loader
    wanted = {i * count // keep for i in range(keep)}
    return [b for i, b in enumerate(loader) if i in wanted]
