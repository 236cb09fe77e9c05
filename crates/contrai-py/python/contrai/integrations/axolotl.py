"""Contrai's lifecycle in an Axolotl job: a plugin that attaches ``ContraiCallback`` to the Trainer
Axolotl builds (its ``post_trainer_create`` hook). In the job's YAML::

    plugins:
      - contrai.integrations.axolotl.ContraiPlugin
    contrai_recipe: recipe.toml
    contrai_run_dir: runs/sft
    contrai_holdout: holdout.json   # optional: alpaca rows (instruction, input, output), read once at the end

``max_steps`` left out of the YAML is set to the steps the recipe plans. Needs Axolotl installed
(``pip install axolotl``); tested with Axolotl 0.19 on CPU (``scripts/compat/llm_tools.sh``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from axolotl.integrations.base import BasePlugin
from pydantic import BaseModel


class ContraiArgs(BaseModel):
    """The YAML keys the plugin adds to Axolotl's config."""

    contrai_recipe: Optional[str] = None
    contrai_run_dir: Optional[str] = None
    contrai_holdout: Optional[str] = None


class ContraiPlugin(BasePlugin):  # type: ignore[misc]  # Axolotl ships no type information
    """Attaches ``ContraiCallback(contrai_recipe, run_dir=contrai_run_dir)`` to the job's Trainer."""

    def get_input_args(self) -> str:
        return "contrai.integrations.axolotl.ContraiArgs"

    def register(self, cfg: dict[str, Any]) -> None:
        """Called on the raw YAML before Axolotl validates it: ``max_steps`` defaults to the
        recipe's plan (the lifecycle stops the Trainer itself when it ends)."""
        recipe = cfg.get("contrai_recipe")
        if recipe is None:
            raise ValueError("plugins lists contrai.integrations.axolotl.ContraiPlugin but the YAML sets no "
                             "contrai_recipe (a recipe: contrai recipe init --for hf > recipe.toml)")
        if not cfg.get("max_steps"):
            from contrai.engine.job import planned_steps

            cfg["max_steps"] = planned_steps(Path(recipe).read_text(), recipe)

    def post_trainer_create(self, cfg: Any, trainer: Any) -> None:
        from contrai.integrations.hf import ContraiCallback

        holdout = None if cfg.contrai_holdout is None else alpaca_rows(cfg, trainer, Path(cfg.contrai_holdout))
        ContraiCallback(cfg.contrai_recipe, run_dir=cfg.contrai_run_dir or "runs/axolotl",
                        holdout_dataset=holdout).attach(trainer)


def alpaca_rows(cfg: Any, trainer: Any, path: Path) -> Any:
    """The holdout file's alpaca rows tokenized as Axolotl tokenizes a ``type: alpaca`` dataset
    (the prompt's labels masked unless ``train_on_inputs``)."""
    from axolotl.prompt_tokenizers import AlpacaPromptTokenizingStrategy
    from axolotl.prompters import AlpacaPrompter
    from datasets import Dataset

    try:
        rows = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"contrai_holdout: {path}: {e} (expected a JSON list of alpaca rows)") from e
    for i, r in enumerate(rows):
        missing = {"instruction", "output"} - set(r)
        if missing:
            raise ValueError(f"contrai_holdout: {path}: row {i} has no {sorted(missing)} "
                             "(expected alpaca rows: instruction, input, output)")
    strategy = AlpacaPromptTokenizingStrategy(AlpacaPrompter(), trainer.processing_class, cfg.train_on_inputs,
                                              cfg.sequence_len)
    tokenized = [strategy.tokenize_prompt(r) for r in rows]
    return Dataset.from_list([{k: list(t[k]) for k in ("input_ids", "attention_mask", "labels")} for t in tokenized])
