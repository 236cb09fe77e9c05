"""The pre-flight check of a Hugging Face or Lightning job, before its first step.

The facts are read off the job here (``facts_hf``, ``facts_lightning``: what is trained in which
precision, adapters and gradient checkpointing, accumulation and the loss, the LR schedule, the
batch, the checkpoint cadence, the validation data); the rules that judge them are the
lifecycle's, in Rust (``contrai_lifecycle::preflight``, the same as ``contrai check`` applies to a
recipe), so each finding is the same typed ``PreflightFinding`` — ``kind``, ``severity``, one
sentence ``message`` with the fix, and the ``evidence`` read. A fact the job does not tell stays
out of the facts, and the rules that need it stay silent.

::

    from contrai import preflight
    findings = preflight.check_hf(trainer)          # or check_hf(args, model), check_lightning(trainer, module)
    preflight.report(findings)                      # [contrai] pre-flight: <sentence>

Private attributes of the frameworks are read only through ``contrai.integrations._compat``.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Literal, Sequence

import torch

from contrai import _core
from contrai.engine.model import tuning
from contrai.protocol import CheckpointCadence, DecayShape, JobFacts, Precision, PreflightFinding

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from transformers import Trainer, TrainingArguments

Finding = PreflightFinding

# Longest schedule sampled step by step to read its shape (a LambdaLR steps in microseconds).
MAX_CURVE_STEPS = 100_000
# How close (mean absolute difference, LR normalised to [0, 1]) a decay must follow a shape.
SHAPE_TOLERANCE = 0.05

# transformers' ``lr_scheduler_type`` → the shape after warmup.
HF_DECAY: dict[str, DecayShape] = {
    "linear": "linear",
    "cosine": "cosine",
    "cosine_with_min_lr": "cosine",
    "cosine_warmup_with_min_lr": "cosine",
    "constant": "constant",
    "constant_with_warmup": "constant",
}
# Schedulers of transformers that take no warmup.
HF_NO_WARMUP = ("constant", "reduce_lr_on_plateau")


def refuse_nothing_to_train(model: torch.nn.Module | None) -> None:
    """A model whose every parameter is frozen can learn nothing, and PyTorch would only say
    "optimizer got an empty parameter list" once training starts: said before the optimizer is
    made (the HF callback's attach, the Lightning callback's setup), with the usual cause."""
    if model is not None and not any(p.requires_grad for p in model.parameters()):
        raise ValueError(
            "every parameter of the model is frozen (requires_grad=False): nothing can train. A freeze "
            "loop run after peft.get_peft_model() also froze the adapters: freeze the base first (get_peft_model "
            "does it for you), or unfreeze the layers meant to train")


def check(facts: JobFacts) -> list[Finding]:
    """The findings of ``facts`` by the lifecycle's rules (none for a job within them)."""
    return _core.preflight(facts)


# What a recipe imposes on a job a callback runs: the conductor sets every step's LR and orders
# the checkpoints, whatever the framework was told.
GOVERNED = ("warmup_ratio", "warmup_steps", "decay", "peak_lr", "checkpoint_every")
# Facts of the job itself that the rules read beside the recipe's schedule (the seed article's).
BESIDE_SCHEDULE = ("tuning", "precision")


def under_recipe(facts: JobFacts, recipe_toml: str, recipe_path: str, holdout: bool) -> list[Finding]:
    """The findings of a job a callback runs under a recipe: the job's own facts (``facts_hf``,
    ``facts_lightning``) but for its schedule and checkpoint cadence, which are the recipe's and
    judged from it (their fixes naming the recipe's keys); the holdout is the callback's; the
    recipe's ``model.precision`` beside the format the job trains in."""
    job: JobFacts = {k: v for k, v in facts.items() if k not in GOVERNED}  # type: ignore[assignment]
    job["holdout"] = holdout
    said = _core.recipe_facts(recipe_toml, recipe_path)
    # The format the recipe asks of Contrai's engine, beside the one the job's settings chose.
    job["recipe_precision"] = said.get("precision")
    recipe: JobFacts = {k: v for k, v in said.items() if k in GOVERNED}  # type: ignore[assignment]
    recipe["source"] = "recipe"
    recipe.update({k: v for k, v in facts.items() if k in BESIDE_SCHEDULE})  # type: ignore[typeddict-item]
    return check(job) + check(recipe)


# What a callback does with its findings (its ``preflight=``): ``stop`` the job on an error (the
# warnings said), ``warn`` (say them all and train), ``off`` (no check).
Mode = Literal["stop", "warn", "off"]


def gate(findings: Sequence[Finding], mode: Mode, speak: bool = True) -> None:
    """What a callback does with the findings before step 1, by ``mode``: under ``stop`` an error
    (a job that would fail as the rules know jobs fail) raises, naming every one; the rest are
    said when ``speak`` (rank 0)."""
    errors = [f["message"] for f in findings if f["severity"] == "error"] if mode == "stop" else []
    if speak:
        report(f for f in findings if not (errors and f["severity"] == "error"))
    if errors:
        raise ValueError("the pre-flight check found what would break this job before step 1:\n- "
                         + "\n- ".join(errors) + "\n(fix it, or pass preflight=\"warn\" to ContraiCallback to train anyway)")


def report(findings: Iterable[Finding]) -> None:
    """Prints each finding as ``[contrai] pre-flight: <sentence>``."""
    for f in findings:
        print(f"[contrai] pre-flight: {f['message']}")


def check_hf(trainer_or_args: Trainer | TrainingArguments, model: torch.nn.Module | None = None) -> list[Finding]:
    """The findings of a Hugging Face job: a ``Trainer`` (its arguments, model, datasets, and its
    own optimizer and scheduler when it was given them), or ``TrainingArguments`` with the model."""
    from transformers import Trainer

    if isinstance(trainer_or_args, Trainer):
        t = trainer_or_args
        return check(facts_hf(t.args, model if model is not None else t.model, t))
    return check(facts_hf(trainer_or_args, model))


def check_lightning(trainer: pl.Trainer, module: pl.LightningModule, train_dataloaders: Any = None,
                    val_dataloaders: Any = None, *, loss_over_window: bool | None = None) -> list[Finding]:
    """The findings of a Lightning job; give the loaders ``fit`` gets when calling it before ``fit``
    (see :func:`facts_lightning`)."""
    return check(facts_lightning(trainer, module, train_dataloaders, val_dataloaders,
                                 loss_over_window=loss_over_window))


def facts_hf(args: TrainingArguments, model: torch.nn.Module | None, trainer: Trainer | None = None) -> JobFacts:
    """What a Hugging Face job says of itself before ``train()``: ``args`` and ``model``, and with
    the ``trainer`` its datasets (steps an epoch, validation data), its loss normalisation and any
    optimizer and scheduler it was given."""
    facts: JobFacts = {"source": "hf", "accumulation": int(args.gradient_accumulation_steps),
                       "per_device_batch": int(args.per_device_train_batch_size),
                       "devices": max(1, int(args.n_gpu)) * int(args.world_size),
                       "peak_lr": float(args.learning_rate)}
    epoch_steps = _hf_epoch_steps(args, trainer)
    total = _hf_total_steps(args, epoch_steps)
    if total is not None:
        facts["total_steps"] = total
    facts.update(_hf_schedule(args, trainer, total))
    precision: Precision | None = "fp16" if args.fp16 else "bf16" if args.bf16 else None
    if model is not None:
        facts.update(_model_facts(model, precision))
        facts.update(_hf_checkpointing(args, model))
        facts.update(_hf_loss(model, trainer))
    elif precision is not None:
        facts["precision"] = precision
    facts.update(_device_facts(facts, args.device))
    cadence = _hf_cadence(args, epoch_steps, total)
    if cadence is not None:
        facts["checkpoint_every"] = cadence
    if trainer is not None:
        facts["eval_split"] = bool(trainer.eval_dataset)
    return facts


def _hf_epoch_steps(args: TrainingArguments, trainer: Trainer | None) -> int | None:
    """Optimizer steps an epoch, as the Trainer counts them: each rank's share of the training set
    in batches of ``train_batch_size`` (``dataloader_drop_last``), over the accumulation, a partial
    window counted; ``None`` without a sized training set."""
    length = getattr(trainer.train_dataset, "__len__", None) if trainer is not None else None
    if not callable(length):
        return None
    per_rank = math.ceil(int(length()) / max(1, int(args.world_size)))
    batch = int(args.train_batch_size)
    batches = per_rank // batch if args.dataloader_drop_last else math.ceil(per_rank / batch)
    return _windows(batches, int(args.gradient_accumulation_steps))


def _windows(batches: int, accumulation: int) -> int:
    """Optimizer steps of an epoch of ``batches`` micro-batches (a last partial window counted)."""
    return max(batches // accumulation + int(batches % accumulation > 0), 1)


def _hf_total_steps(args: TrainingArguments, epoch_steps: int | None) -> int | None:
    """The optimizer steps the job plans: ``max_steps``, else the epochs' steps."""
    if args.max_steps > 0:
        return int(args.max_steps)
    if epoch_steps is None:
        return None
    return math.ceil(float(args.num_train_epochs) * epoch_steps)


def _hf_schedule(args: TrainingArguments, trainer: Trainer | None, total: int | None) -> JobFacts:
    """Warmup and decay: read off the scheduler the Trainer was given (``optimizers=``), else from
    ``lr_scheduler_type`` and ``warmup_steps`` (a share below 1; 4.x also ``warmup_ratio``)."""
    scheduler = getattr(trainer, "lr_scheduler", None) if trainer is not None else None
    if trainer is not None and scheduler is not None and total is not None:
        curve = lr_curve(scheduler, total, keep=[m for m in [trainer.model] if isinstance(m, torch.nn.Module)])
        return _curve_facts(curve) if curve else {}
    kind = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    facts: JobFacts = {"decay": HF_DECAY.get(kind, "other")}
    warmup = float(args.warmup_steps)
    ratio = float(getattr(args, "warmup_ratio", 0.0) or 0.0)
    if kind in HF_NO_WARMUP:
        facts["warmup_steps"] = 0
    elif warmup >= 1:
        facts["warmup_steps"] = int(warmup)
    elif warmup > 0:
        facts["warmup_ratio"] = warmup
    elif ratio > 0:
        facts["warmup_ratio"] = ratio
    else:
        facts["warmup_steps"] = 0
    return facts


def _hf_checkpointing(args: TrainingArguments, model: torch.nn.Module) -> JobFacts:
    """Gradient checkpointing as it will run: turned on by the Trainer (``gradient_checkpointing``,
    with its kwargs and, on a text model, transformers' input-gradient hook), or already on."""
    from contrai.integrations._compat import hf as compat

    grads = compat.input_grads(model)
    if compat.trainer_checkpointing(args):
        hooked = compat.checkpointing_hooks_inputs(model)
        return _checkpointing(compat.trainer_checkpointing_reentrant(args), True if hooked else grads)
    if compat.checkpointing_on(model):
        return _checkpointing(compat.checkpointing_reentrant(model), grads)
    return {"gradient_checkpointing": False}


def _checkpointing(reentrant: bool | None, input_grads: bool | None) -> JobFacts:
    """Facts of gradient checkpointing that is on (unknowns left out)."""
    facts: JobFacts = {"gradient_checkpointing": True}
    if reentrant is not None:
        facts["reentrant"] = reentrant
    if input_grads is not None:
        facts["input_grads"] = input_grads
    return facts


def _hf_loss(model: torch.nn.Module, trainer: Trainer | None) -> JobFacts:
    """Whether the loss is per token, and whether the Trainer normalises it over the window."""
    from contrai.integrations._compat import hf as compat

    token = compat.token_level_loss(model)
    if token is None:
        return {}
    window = compat.loss_over_window(trainer) if trainer is not None else compat.passes_num_items(model)
    return {"token_level_loss": token, "loss_over_window": window}


def _hf_cadence(args: TrainingArguments, epoch_steps: int | None, total: int | None) -> CheckpointCadence | None:
    """How often the Trainer saves: never (``save_strategy="no"``), every ``save_steps`` (a share of
    the steps below 1), or once an epoch; ``None`` when that cannot be counted (``"best"``)."""
    strategy = str(getattr(args.save_strategy, "value", args.save_strategy))
    if strategy == "no":
        return "Never"
    if strategy == "epoch":
        return {"Steps": epoch_steps} if epoch_steps is not None else None
    if strategy != "steps":
        return None
    steps = float(args.save_steps)
    if steps >= 1:
        return {"Steps": int(steps)}
    return {"Steps": max(1, math.ceil(steps * total))} if total is not None else None


def facts_lightning(trainer: pl.Trainer, module: pl.LightningModule, train_dataloaders: Any = None,
                    val_dataloaders: Any = None, *, loss_over_window: bool | None = None) -> JobFacts:
    """What a Lightning job says of itself: the ``trainer`` (precision, accumulation, devices,
    checkpoint callbacks, step limit), the ``module`` (its transformers model, adapters and
    checkpointing, ``configure_optimizers``' schedule), and its data — the loaders ``fit`` has, or
    before ``fit`` the ones given here (a ``val_dataloaders``, or a module or datamodule that
    defines ``val_dataloader``). Lightning averages each micro-batch's loss: a token-level model's
    loss counts as not normalised over the window unless ``loss_over_window=True`` says the
    ``training_step`` divides by the window's token count itself."""
    facts: JobFacts = {"source": "lightning", "accumulation": int(trainer.accumulate_grad_batches),
                       "devices": int(trainer.world_size)}
    loader = _train_loader(trainer, train_dataloaders)
    batches = _length(loader)
    acc = int(trainer.accumulate_grad_batches)
    epoch_steps = _windows(batches, acc) if batches is not None else None
    total = _lightning_total_steps(trainer, epoch_steps)
    if total is not None:
        facts["total_steps"] = total
    batch = getattr(loader, "batch_size", None)
    if isinstance(batch, int):
        facts["per_device_batch"] = batch
    facts.update(_model_facts(module, _lightning_precision(str(trainer.precision))))
    facts.update(_device_facts(facts, trainer.strategy.root_device))
    facts.update(_lightning_model(module, loss_over_window))
    facts.update(_lightning_schedule(trainer, module, total))
    cadence = _lightning_cadence(trainer, epoch_steps)
    if cadence is not None:
        facts["checkpoint_every"] = cadence
    evaluates = _lightning_eval(trainer, module, val_dataloaders)
    if evaluates is not None:
        facts["eval_split"] = evaluates
    return facts


def _lightning_precision(precision: str) -> Precision | None:
    """The format a Lightning ``precision`` trains in (``None`` for 32-bit: the weights then say)."""
    if precision.startswith("16"):
        return "fp16"
    if precision.startswith("bf16"):
        return "bf16"
    return None


def _train_loader(trainer: pl.Trainer, given: Any) -> Any:
    """The training loader: the one ``fit`` loaded, else the one given (the first of a collection)."""
    loader = trainer.train_dataloader if trainer.train_dataloader is not None else given
    if isinstance(loader, dict):
        loader = next(iter(loader.values()), None)
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    return loader


def _length(loader: Any) -> int | None:
    """Batches in an epoch of ``loader`` (``None`` when unsized)."""
    try:
        return len(loader) if loader is not None else None
    except TypeError:
        return None


def _lightning_total_steps(trainer: pl.Trainer, epoch_steps: int | None) -> int | None:
    """Optimizer steps the fit plans: ``max_steps``, else ``max_epochs`` (Lightning's 1,000 when
    neither is set) of ``epoch_steps``."""
    if trainer.max_steps > 0:
        return int(trainer.max_steps)
    if epoch_steps is None:
        return None
    return (trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else 1000) * epoch_steps


def _lightning_model(module: pl.LightningModule, over_window: bool | None) -> JobFacts:
    """Checkpointing and the loss of the transformers model inside ``module`` (none: nothing)."""
    from contrai.integrations._compat import hf as compat

    inner = _transformers_model(module)
    if inner is None:
        return {}
    facts: JobFacts = {"gradient_checkpointing": False}
    if compat.checkpointing_on(inner):
        facts = _checkpointing(compat.checkpointing_reentrant(inner), compat.input_grads(inner))
    token = compat.token_level_loss(inner)
    if token is not None:
        facts["token_level_loss"] = token
        facts["loss_over_window"] = bool(over_window)
    return facts


def _transformers_model(module: torch.nn.Module) -> torch.nn.Module | None:
    """The outermost transformers model inside ``module`` (``None`` without transformers)."""
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return None
    return next((m for m in module.modules() if isinstance(m, PreTrainedModel)), None)


def _lightning_schedule(trainer: pl.Trainer, module: pl.LightningModule, total: int | None) -> JobFacts:
    """Warmup, decay and peak LR of the fit's first optimizer: the schedulers ``fit`` set up, or
    before ``fit`` what ``configure_optimizers`` returns (one that needs the Trainer attached tells
    nothing until ``fit``). No scheduler: a constant LR, no warmup."""
    optimizer, scheduler, interval = _configured(trainer, module)
    if optimizer is None:
        return {}
    peak: JobFacts = {"peak_lr": float(optimizer.param_groups[0]["lr"])}
    if scheduler is None:
        return {**peak, "decay": "constant", "warmup_steps": 0}
    steps = total if interval == "step" else trainer.max_epochs
    curve = lr_curve(scheduler, steps, keep=[module]) if steps is not None and steps > 0 else None
    return _curve_facts(curve) if curve else peak


def _configured(trainer: pl.Trainer, module: pl.LightningModule) -> tuple[torch.optim.Optimizer | None, Any, str]:
    """The first optimizer, its first scheduler and that scheduler's interval."""
    if trainer.optimizers:
        configs = trainer.lr_scheduler_configs
        if configs:
            return trainer.optimizers[0], configs[0].scheduler, configs[0].interval
        return trainer.optimizers[0], None, "step"
    try:
        returned = module.configure_optimizers()
    except Exception:  # noqa: BLE001 — a user's hook that needs the running fit: nothing to read yet
        return None, None, "step"
    return _first_optimizer(returned)


def _first_optimizer(conf: Any) -> tuple[torch.optim.Optimizer | None, Any, str]:
    """The first optimizer and scheduler of any form ``configure_optimizers`` may return (an
    optimizer; a list; a pair of lists; a dict with ``lr_scheduler`` a scheduler or a config)."""
    if isinstance(conf, torch.optim.Optimizer):
        return conf, None, "step"
    if isinstance(conf, dict):
        sched = conf.get("lr_scheduler")
        if isinstance(sched, dict):
            return conf.get("optimizer"), sched.get("scheduler"), str(sched.get("interval", "epoch"))
        return conf.get("optimizer"), sched, "epoch"
    if isinstance(conf, (list, tuple)) and conf:
        if len(conf) == 2 and isinstance(conf[0], (list, tuple)):
            optimizer = conf[0][0] if conf[0] else None
            scheds = list(conf[1]) if isinstance(conf[1], (list, tuple)) else [conf[1]]
            first = scheds[0] if scheds else None
            if isinstance(first, dict):
                return optimizer, first.get("scheduler"), str(first.get("interval", "epoch"))
            return optimizer, first, "epoch"
        return _first_optimizer(conf[0])
    return None, None, "step"


def _lightning_cadence(trainer: pl.Trainer, epoch_steps: int | None) -> CheckpointCadence | None:
    """How often the fit's ``ModelCheckpoint``s save: none, ``every_n_train_steps``, or, saving
    after each validation, at the ``val_check_interval`` (batches, or a share of an epoch) or once
    in ``every_n_epochs`` epochs."""
    from contrai.integrations._compat import lightning as compat

    callbacks = trainer.checkpoint_callbacks
    if not callbacks:
        return "Never"
    acc = int(trainer.accumulate_grad_batches)
    interval = trainer.val_check_interval
    every: list[int] = []
    for cb in callbacks:
        steps, epochs, timed = compat.checkpoint_every(cb)
        if steps > 0:
            every.append(steps)
        elif timed:
            return None
        elif epochs > 0 and isinstance(interval, int):
            every.append(max(1, interval // acc))
        elif epochs > 0 and epoch_steps is not None:
            share = interval if isinstance(interval, float) and 0 < interval < 1 else epochs
            every.append(max(1, math.ceil(share * epoch_steps)))
    return {"Steps": min(every)} if every else None


def _lightning_eval(trainer: pl.Trainer, module: pl.LightningModule, given: Any) -> bool | None:
    """Whether the fit validates: off with ``limit_val_batches=0`` or no ``validation_step``; on
    with validation data given, loaded by ``fit``, or defined by the module or datamodule."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    from contrai.integrations._compat import lightning as compat

    if trainer.limit_val_batches == 0 or not is_overridden("validation_step", module):
        return False
    if given is not None or is_overridden("val_dataloader", module):
        return True
    attached = compat.val_source(trainer)
    if attached is not None:
        return attached
    datamodule = getattr(trainer, "datamodule", None)
    return True if datamodule is not None and is_overridden("val_dataloader", datamodule) else False


def _model_facts(model: torch.nn.Module, autocast: Precision | None) -> JobFacts:
    """Precision (the autocast format, else the trainable weights'), the dtype the model's config
    says, and how it is tuned (PEFT's LoRA layers, other tuner layers, or every weight)."""
    facts: JobFacts = {"tuning": tuning(model)}
    precision = autocast or _weights_precision(model)
    if precision is not None:
        facts["precision"] = precision
    said = _config_dtype(model)
    if said is not None:
        facts["model_dtype"] = said
    return facts


def _device_facts(facts: JobFacts, device: torch.device) -> JobFacts:
    """Whether ``device`` multiplies bf16 matrices natively, read when the job trains in bf16."""
    if facts.get("precision") != "bf16":
        return {}
    native = native_bf16(device)
    return {} if native is None else {"native_bf16": native}


def native_bf16(device: torch.device) -> bool | None:
    """Whether ``device`` multiplies bf16 matrices natively: PyTorch's oneDNN bf16 path on a CPU
    (AVX-512 or AMX; without it every bf16 matmul takes a reference kernel), bf16 tensor cores on a
    GPU (Ampere on); ``None`` for a device PyTorch cannot tell of."""
    if device.type == "cpu":
        supported = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
        return None if supported is None else bool(supported())
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    return None


def _weights_precision(model: torch.nn.Module) -> Precision | None:
    """The format of the first trainable floating-point parameter."""
    for p in model.parameters():
        if p.requires_grad and p.is_floating_point():
            return _precision_of(p.dtype)
    return None


def _config_dtype(model: torch.nn.Module) -> Precision | None:
    """The dtype the transformers config inside ``model`` says (5.x ``dtype``, 4.x ``torch_dtype``)."""
    for m in model.modules():
        config = getattr(m, "config", None)
        said = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if said is not None:
            return _precision_of(said)
    return None


def _precision_of(dtype: Any) -> Precision | None:
    """A torch dtype (or its name) as a precision."""
    names: dict[str, Precision] = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
    return names.get(str(dtype).removeprefix("torch."))


def lr_curve(scheduler: Any, steps: int, keep: Sequence[torch.nn.Module] = ()) -> list[float] | None:
    """The LR of the first parameter group at each of ``steps`` scheduler steps, read by stepping a
    copy of ``scheduler`` over a stand-in optimizer (the job's optimizer, state and scheduler are
    left as they are; the modules in ``keep`` are shared, never copied). ``None`` for a scheduler
    that cannot step alone (``ReduceLROnPlateau``) or a schedule longer than ``MAX_CURVE_STEPS``."""
    optimizer = getattr(scheduler, "optimizer", None)
    if (optimizer is None or steps > MAX_CURVE_STEPS
            or isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)):
        return None
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    stand_in = torch.optim.SGD([{**g, "params": [torch.zeros(1, requires_grad=True)]} for g in groups],
                               lr=float(groups[0]["lr"]))
    memo: dict[int, Any] = {id(optimizer): stand_in}
    for m in keep:
        memo[id(m)] = m
        memo.update({id(p): p for p in m.parameters()})
    try:
        copied = copy.deepcopy(scheduler, memo)
    except Exception:  # noqa: BLE001 — a scheduler holding something that cannot be copied tells nothing
        return None
    lrs: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            lrs.append(float(stand_in.param_groups[0]["lr"]))
            try:
                copied.step()
            except (ValueError, ZeroDivisionError):
                break
    return lrs


def _curve_facts(lrs: list[float]) -> JobFacts:
    """Warmup share, decay shape and peak of an LR curve: the warmup runs until the peak; what
    follows is named cosine, linear or constant when it follows that shape within
    ``SHAPE_TOLERANCE``, else other."""
    peak = max(lrs)
    if not peak > 0:
        return {}
    warmup = next(i for i, lr in enumerate(lrs) if lr >= peak * (1 - 1e-6))
    facts: JobFacts = {"peak_lr": peak, "warmup_ratio": warmup / len(lrs)}
    tail = lrs[warmup:]
    floor = tail[-1]
    if len(tail) < 3 or peak - min(tail) <= 1e-3 * peak:
        return {**facts, "decay": "constant"}
    y = [(lr - floor) / (peak - floor) for lr in tail]
    x = [i / (len(y) - 1) for i in range(len(y))]
    shapes: dict[DecayShape, list[float]] = {
        "linear": [1 - t for t in x],
        "cosine": [0.5 * (1 + math.cos(math.pi * t)) for t in x],
    }
    errors = {name: sum(abs(a - b) for a, b in zip(y, ref)) / len(y) for name, ref in shapes.items()}
    best = min(errors, key=lambda k: errors[k])
    return {**facts, "decay": best if errors[best] <= SHAPE_TOLERANCE else "other"}
