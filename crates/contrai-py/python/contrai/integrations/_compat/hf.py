"""What ``contrai.integrations.hf`` needs of a Hugging Face ``Trainer`` that its public API does not give.

Each function says what it reaches into and why. Tested with the ``transformers`` versions in
``TESTED`` (``scripts/compat/run.sh`` runs the package's tests with the oldest and the newest).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from contrai.integrations._compat import check_version

TESTED = (">=4.47", "<6")


def check() -> bool:
    """Whether the installed transformers is in ``TESTED`` (a warning when not)."""
    return check_version("transformers", TESTED)


def find_trainer_on_stack() -> Trainer | None:
    """The ``Trainer`` whose method is calling us, found by walking the call stack (its frames'
    ``self``): the deprecated way a callback that was never attached finds its Trainer."""
    frame = inspect.currentframe()
    while frame is not None:
        obj = frame.f_locals.get("self")
        if isinstance(obj, Trainer):
            return obj
        frame = frame.f_back
    return None


def register(trainer: Trainer, callback: TrainerCallback) -> None:
    """``callback`` among the Trainer's callbacks, once: ``add_callback`` would add it twice when it
    was already passed in ``callbacks=`` (read from ``trainer.callback_handler.callbacks``)."""
    if not any(c is callback for c in trainer.callback_handler.callbacks):
        trainer.add_callback(callback)


def tap_loss(trainer: Trainer, sink: Callable[[torch.Tensor], None],
             inputs: Callable[[Any], None] = lambda _: None) -> None:
    """Each micro-batch's inputs to ``inputs`` and its loss to ``sink``: ``trainer.training_step``
    (``(model, inputs, ...)``) replaced on the instance by a wrapper (no callback event carries
    the batch or the loss of every micro-batch)."""
    step = trainer.training_step

    def training_step(*a: Any, **k: Any) -> torch.Tensor:
        inputs(a[1] if len(a) > 1 else k.get("inputs"))
        loss = step(*a, **k)
        sink(loss)
        return loss

    trainer.training_step = training_step  # type: ignore[method-assign]


def tap_grad_norm(trainer: Trainer, sink: Callable[[float | None], None]) -> None:
    """Each step's gradient norm before clipping to ``sink``: ``trainer.accelerator.clip_grad_norm_``
    replaced on the instance by a wrapper (the Trainer clips through it and keeps the norm to itself;
    without ``max_grad_norm`` transformers 5 still calls it with an infinite bound, 4.x does not)."""
    accelerator = trainer.accelerator
    clip = accelerator.clip_grad_norm_

    def clip_grad_norm_(*a: Any, **k: Any) -> Any:
        norm = clip(*a, **k)
        sink(float(norm) if norm is not None else None)
        return norm

    accelerator.clip_grad_norm_ = clip_grad_norm_


def epoch_batches(trainer: Trainer, epoch: int) -> Any:
    """The training batches of ``epoch`` as the Trainer's loop draws them: a fresh
    ``get_train_dataloader()`` with ``set_epoch`` on it and on the batch sampler accelerate wraps
    (what ``_inner_training_loop`` does before iterating)."""
    loader = trainer.get_train_dataloader()
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    inner = getattr(getattr(loader, "batch_sampler", None), "batch_sampler", None)
    set_epoch = getattr(inner, "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)
    return loader


def prepare_inputs(trainer: Trainer, batch: Any) -> Any:
    """``batch`` where the Trainer puts its own training batches (its device, DeepSpeed's dtype):
    ``trainer._prepare_inputs``, the Trainer's private step before the model sees a batch."""
    return trainer._prepare_inputs(batch)


def prepared_like_eval(trainer: Trainer, dataset: Any) -> Any:
    """``dataset`` prepared as the trainer prepared its evaluation set, when the trainer prepares
    datasets itself (TRL's ``SFTTrainer``: tokenized, its completion masked, packed as
    ``eval_packing`` says, through its private ``_prepare_dataset``) and ``dataset`` is still raw
    (no ``input_ids`` column); else ``dataset`` as it is."""
    prepare = getattr(trainer, "_prepare_dataset", None)
    columns = getattr(dataset, "column_names", None)
    if prepare is None or getattr(trainer, "_skip_prepare_dataset", True) or columns is None or "input_ids" in columns:
        return dataset
    args = trainer.args
    packing = getattr(args, "eval_packing", None)
    packing = getattr(args, "packing", False) if packing is None else packing
    return prepare(dataset, trainer.processing_class, args, packing, getattr(trainer, "_formatting_func", None),
                   "holdout")


def before_optimizer_load(trainer: Trainer, hook: Callable[[Path], None]) -> None:
    """``hook(checkpoint)`` before the Trainer loads a checkpoint's optimizer and scheduler when it
    resumes (its private ``_load_optimizer_and_scheduler``, which runs before any callback does):
    the optimizer must have the parameter groups the checkpoint saved by then."""
    load = trainer._load_optimizer_and_scheduler

    def hooked(checkpoint: str | None) -> None:
        if checkpoint is not None:
            hook(Path(checkpoint))
        load(checkpoint)

    setattr(trainer, "_load_optimizer_and_scheduler", hooked)


def shards_parameters(trainer: Trainer) -> bool:
    """Whether FSDP or DeepSpeed ZeRO-3 splits the parameters across ranks: ``is_fsdp_enabled`` and
    the ``zero_stage`` of Accelerate's DeepSpeed plugin (``trainer.accelerator.state``)."""
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    state = getattr(getattr(trainer, "accelerator", None), "state", None)
    plugin = getattr(state, "deepspeed_plugin", None)
    return plugin is not None and getattr(plugin, "zero_stage", 0) == 3


def hold_lr(scheduler: Any, lr: Callable[[], float]) -> None:
    """The Trainer's scheduler keeps the LR ``lr()`` gives (the conductor's) instead of its own
    schedule: the ``lr_lambdas`` of the ``LambdaLR`` the Trainer builds, replaced (other schedulers
    are left; the LR is set before every step either way)."""
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        scheduler.lr_lambdas = [_factor(float(base), lr) for base in scheduler.base_lrs]


def _factor(base: float, lr: Callable[[], float]) -> Callable[[int], float]:
    """A ``LambdaLR`` factor that turns the group's base LR into ``lr()``."""
    return lambda _step: lr() / base if base else 1.0


def show_lr(scheduler: Any, lr: float) -> None:
    """The LR the Trainer logs for the next step (it reads ``get_last_lr()``): the scheduler's
    ``_last_lr``, set to ``lr`` in every parameter group."""
    if scheduler is not None:
        scheduler._last_lr = [lr] * len(scheduler.optimizer.param_groups)


def extend_max_steps(state: TrainerState, control: TrainerControl, need: int) -> None:
    """The Trainer's step limit raised to ``need`` while it trains: ``state.max_steps``, which its
    loop and its stop rule read at every step, and the stop it already set for the old limit."""
    if state.max_steps >= need:
        return
    if control.should_training_stop and state.global_step >= state.max_steps:
        control.should_training_stop = False
    state.max_steps = need


def checkpoint_dir(args: TrainingArguments, step: int) -> Path:
    """The directory the Trainer saves step ``step`` in: ``checkpoint-<step>`` (its
    ``PREFIX_CHECKPOINT_DIR``) under ``output_dir``."""
    if args.output_dir is None:
        raise ValueError("TrainingArguments.output_dir is unset: the Trainer's checkpoints have nowhere to go")
    return Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{step}"


# What ``contrai.preflight`` reads of a job before its first step.


def transformers_major() -> int:
    """The installed transformers' major version (its defaults differ between 4.x and 5.x)."""
    from importlib.metadata import version

    return int(version("transformers").split(".")[0])


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model under a PEFT wrapper (``get_base_model()``, PEFT's public unwrap) and a DDP or
    ``torch.compile`` wrapper (``module``, ``_orig_mod``)."""
    for attr in ("module", "_orig_mod"):
        inner = getattr(model, attr, None)
        if isinstance(inner, torch.nn.Module):
            model = inner
    get_base = getattr(model, "get_base_model", None)
    if callable(get_base):
        base = get_base()
        if isinstance(base, torch.nn.Module):
            return base
    return model


def checkpointing_reentrant(model: torch.nn.Module) -> bool | None:
    """Whether the gradient checkpointing already on in ``model`` re-enters the forward: the
    ``use_reentrant`` keyword of the function transformers puts on each checkpointed module
    (``_gradient_checkpointing_func``, a ``functools.partial`` of ``torch.utils.checkpoint``'s
    ``checkpoint``; unsaid, torch's default: reentrant). ``None`` when no module has one on."""
    for module in model.modules():
        func = getattr(module, "_gradient_checkpointing_func", None)
        if func is None or not getattr(module, "gradient_checkpointing", False):
            continue
        keywords = getattr(func, "keywords", None)
        return bool(keywords.get("use_reentrant", True)) if isinstance(keywords, dict) else True
    return None


def trainer_checkpointing_reentrant(args: TrainingArguments) -> bool:
    """Whether the checkpointing a Trainer turns on (``gradient_checkpointing=True``) re-enters: the
    ``use_reentrant`` of ``gradient_checkpointing_kwargs`` (5.x: ``activation_checkpointing_kwargs``,
    ``every_n_layers`` and ``offload`` taken out first); none given, transformers' own default
    (5.x non-reentrant, 4.x reentrant); other keywords without it, torch's default (reentrant)."""
    given = getattr(args, "activation_checkpointing_kwargs", None) or args.gradient_checkpointing_kwargs
    kwargs = {k: v for k, v in given.items() if k not in ("every_n_layers", "offload")} if isinstance(given, dict) else {}
    if not kwargs:
        return transformers_major() < 5
    return bool(kwargs.get("use_reentrant", True))


def trainer_checkpointing(args: TrainingArguments) -> bool:
    """Whether the Trainer turns gradient checkpointing on (5.x ``activation_checkpointing``, of which
    ``gradient_checkpointing`` is the deprecated alias)."""
    return bool(getattr(args, "activation_checkpointing", False) or args.gradient_checkpointing)


def checkpointing_hooks_inputs(model: torch.nn.Module) -> bool:
    """Whether transformers, turning checkpointing on, also makes the input embeddings' output require
    grad (``enable_input_require_grads``): 5.x for a text model (``main_input_name == "input_ids"``) and,
    as 4.x, for adapters transformers itself loaded (``_hf_peft_config_loaded``); a PEFT wrapper's
    base is neither marked nor hooked by 4.x."""
    base = base_model(model)
    if getattr(base, "_hf_peft_config_loaded", False):
        return True
    return transformers_major() >= 5 and getattr(base, "main_input_name", None) == "input_ids"


def checkpointing_on(model: torch.nn.Module) -> bool:
    """Whether gradient checkpointing is on in ``model`` already: 5.x ``is_activation_checkpointing``,
    4.x ``is_gradient_checkpointing`` (5.x keeps it as a deprecated alias)."""
    base = base_model(model)
    on = getattr(base, "is_activation_checkpointing", None)
    if on is None:
        on = getattr(base, "is_gradient_checkpointing", False)
    return bool(on)


def input_grads(model: torch.nn.Module) -> bool | None:
    """Whether the input embeddings' output requires grad now: their weight trains, or a forward hook
    sits on them (``_forward_hooks``: transformers' and PEFT's ``make_inputs_require_grad(s)`` hooks
    leave no other trace). ``None`` when the model shows no input embeddings."""
    get = getattr(base_model(model), "get_input_embeddings", None)
    try:
        emb = get() if callable(get) else None
    except (NotImplementedError, AttributeError):
        return None
    if not isinstance(emb, torch.nn.Module):
        return None
    if any(p.requires_grad for p in emb.parameters()):
        return True
    return bool(emb._forward_hooks)


# The loss families of transformers' ``LOSS_MAPPING`` that average over tokens.
TOKEN_LOSSES = ("ForCausalLM", "ForMaskedLM", "ForTokenClassification", "ForConditionalGeneration")


def token_level_loss(model: torch.nn.Module) -> bool | None:
    """Whether the model's own loss is a mean over tokens: the ``LOSS_MAPPING`` family its
    ``loss_type`` names; unset (4.x before ``loss_type`` was filled in), the family its class name
    ends with (``BertForSequenceClassification``); neither, ``ForCausalLM``, where
    ``loss_function`` falls back. ``None`` for a model outside transformers."""
    from transformers import PreTrainedModel
    from transformers.loss.loss_utils import LOSS_MAPPING

    base = base_model(model)
    if not isinstance(base, PreTrainedModel):
        return None
    loss_type = getattr(base, "loss_type", None)
    if loss_type not in LOSS_MAPPING:
        name = type(base).__name__
        loss_type = next((k for k in LOSS_MAPPING if name.endswith(k)), "ForCausalLM")
    return loss_type in TOKEN_LOSSES


def passes_num_items(model: torch.nn.Module) -> bool:
    """Whether a Trainer gives this model's loss ``num_items_in_batch`` (the accumulation window's
    token count), decided as the Trainer decides ``model_accepts_loss_kwargs``: the model's
    ``accepts_loss_kwargs`` when it has one, else a ``**kwargs`` in its ``forward``."""
    base = base_model(model)
    accepts = getattr(base, "accepts_loss_kwargs", None)
    if accepts is not None:
        return bool(accepts)
    params = inspect.signature(base.forward).parameters.values()
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)


def loss_over_window(trainer: Trainer) -> bool:
    """Whether this Trainer's loss is normalised over the accumulation window: its
    ``loss_is_scaled_for_ga`` when a subclass says so (5.x), else what ``training_step`` decides —
    ``model_accepts_loss_kwargs`` or a ``compute_loss_func``."""
    scaled = getattr(trainer, "loss_is_scaled_for_ga", None)
    if scaled is not None:
        return bool(scaled)
    return bool(getattr(trainer, "model_accepts_loss_kwargs", False) or trainer.compute_loss_func is not None)
