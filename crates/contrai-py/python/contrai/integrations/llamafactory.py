"""Contrai's lifecycle in a LLaMA-Factory SFT job. LLaMA-Factory builds its Trainer inside
``run_exp`` and hands no hook the Trainer object (``run_exp(callbacks=[...])`` only lists the
callback, which then finds its Trainer too late to make the train set droppable): :func:`attach_on_build`
makes the SFT workflow's Trainer attach the callback as it is built::

    from contrai.integrations.hf import ContraiCallback
    from contrai.integrations.llamafactory import attach_on_build
    from llamafactory.train.tuner import run_exp

    attach_on_build(ContraiCallback("recipe.toml", run_dir="runs/sft", holdout_dataset=holdout))
    run_exp(args=dict(stage="sft", finetuning_type="lora", max_steps=planned_steps(...), ...))

It replaces ``llamafactory.train.sft.workflow.CustomSeq2SeqTrainer`` with a subclass (LLaMA-Factory
has no public way in); tested with LLaMA-Factory 0.9.5 on CPU (``scripts/compat/llm_tools.sh``).
"""

from __future__ import annotations

from typing import Any

from contrai.integrations.hf import ContraiCallback


def attach_on_build(callback: ContraiCallback) -> None:
    """The next SFT Trainer LLaMA-Factory builds attaches ``callback`` (``ContraiCallback.attach``)."""
    import llamafactory.train.sft.workflow as workflow

    base: Any = workflow.CustomSeq2SeqTrainer
    if getattr(base, "contrai_attaches", None) is not None:
        base = base.__bases__[0]  # attach_on_build called before: replace its callback

    class ContraiSeq2SeqTrainer(base):  # type: ignore[misc]  # LLaMA-Factory ships no types
        contrai_attaches = callback

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            callback.attach(self)

    workflow.CustomSeq2SeqTrainer = ContraiSeq2SeqTrainer
