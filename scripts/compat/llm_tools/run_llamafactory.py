"""A LLaMA-Factory LoRA SFT of SmolLM2-135M on CPU under ContraiCallback, attached through
``contrai.integrations.llamafactory.attach_on_build`` — ``run_llamafactory.py MODEL DATA_DIR OUT_DIR`` (the
data from ``make_data.py``; the run directory is ``OUT_DIR/run``)."""

import json
import sys
from pathlib import Path
from typing import Any

from contrai.engine import planned_steps
from contrai.integrations.hf import ContraiCallback
from contrai.integrations.llamafactory import attach_on_build
from llamafactory.train.tuner import run_exp

RECIPE = Path(__file__).resolve().parent / "recipe.toml"
CUTOFF = 160


def holdout_rows(model: str, path: Path) -> list[dict[str, Any]]:
    """The holdout tokenized as LLaMA-Factory's supervised preprocessing does (its chat template,
    the prompt's labels masked)."""
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    template = get_template_and_fix_tokenizer(tok, DataArguments(template="smollm2"))
    rows = []
    for r in json.loads(path.read_text()):
        messages = [{"role": "user", "content": r["instruction"] + "\n" + r["input"]},
                    {"role": "assistant", "content": r["output"]}]
        prompt, answer = template.encode_oneturn(tok, messages)
        prompt = prompt[: CUTOFF - len(answer)]
        rows.append({"input_ids": prompt + answer, "attention_mask": [1] * (len(prompt) + len(answer)),
                     "labels": [-100] * len(prompt) + answer})
    return rows


def main(model: str, data: Path, out: Path) -> None:
    from datasets import Dataset

    holdout = Dataset.from_list(holdout_rows(model, data / "spam_holdout.json"))
    attach_on_build(ContraiCallback(RECIPE, run_dir=out / "run", holdout_dataset=holdout))
    run_exp(args=dict(
        stage="sft", do_train=True, model_name_or_path=model, template="smollm2",
        finetuning_type="lora", lora_rank=8, lora_alpha=16, lora_dropout=0.0, lora_target="q_proj,v_proj",
        dataset_dir=str(data), dataset="spam_train", eval_dataset="spam_val", cutoff_len=CUTOFF,
        output_dir=str(out / "out"), overwrite_output_dir=True, per_device_train_batch_size=2,
        per_device_eval_batch_size=4, max_steps=planned_steps(RECIPE.read_text(), str(RECIPE)), learning_rate=1e-3,
        lr_scheduler_type="constant", save_strategy="no", report_to="none", use_cpu=True, bf16=False, fp16=False,
        seed=0, disable_tqdm=True, logging_steps=1, disable_gradient_checkpointing=True, dataloader_num_workers=0,
        plot_loss=False))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
