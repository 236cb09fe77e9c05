"""The seed article's job measured (BENCHMARKS.md): SmolLM2-135M fine-tuned with LoRA (r 8, q/v)
under TRL's ``SFTTrainer`` on real e-mails, three ways with the same seed, data and steps:

- ``plain``: the fine-tune without Contrai (the Trainer's own linear schedule, no callback),
  adapters merged with ``merge_and_unload``;
- ``contrai``: under ``ContraiCallback`` (validate, main, contract, refine), no pruning;
- ``contrai-pruned``: the same with a quarter of every feed-forward layer's units cut.

Each final model's holdout perplexity dense, int8 (g32, round to nearest) and int4 (g32,
GPTQ on 32 training e-mails); its bytes on disk as safetensors and GGUF Q8_0 / Q4_0; and
``llama-cpp-python``'s prompt and generation tokens/s on the GGUF files (medians of ``--repeats``).

    CONTRAI_LLM=~/.cache/contrai-llm/smollm2-135m \\
        python scripts/bench/llm/sft.py ../shared/data/spamassassin.jsonl OUT_DIR [--json]

``--speed``: only llama.cpp's tokens/s of the GGUF files an earlier run left in OUT_DIR, side by
side in one quiet process (agreement is not measured then).

One process; the two cores do one thing at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from quantize import SEQ, folder_bytes, llama_cpp_run, measure

from contrai.engine import planned_steps
from contrai.integrations.hf import ContraiCallback
from contrai.quant.serving import write_gguf
from contrai.quant.weights import Scheme, each_pass, quantized_in_place

RECIPE = """
[run]
eval_every = 10
checkpoint_every = 10
phases = ["validate", "main", "contract", "refine"]
[validate]
batch = 8
[main]
steps = {main}
batch = 8
lr = 1e-3
warmup = 0.05
[contract]
budget = 0.3
batch = 8
eval_every = 5
prune_every = 5
prune_units = true
prune = [{prune}]
[refine]
budget = 0.1
quantize = "none"
[refine.distill]
enabled = false
"""


WAYS = ["plain", "contrai", "contrai-pruned"]


def rows(tok: Any, texts: list[str]) -> list[list[int]]:
    return [ids[:SEQ] for ids in (tok(t)["input_ids"] for t in texts) if len(ids) >= SEQ]


def fine_tune(way: str, path: Path, tok: Any, train: list[list[int]], val: list[list[int]],
              holdout: list[list[int]], out: Path, main: int) -> tuple[Any, float]:
    """One fine-tune; its final model (merged, without PEFT's layers) and its seconds."""
    import peft
    import trl

    torch.manual_seed(0)
    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                                peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                lora_dropout=0.0, task_type="CAUSAL_LM"))
    recipe = out / f"{way}.toml"
    prune = '{ params = "*.mlp.up_proj.weight", init = 0.1, final = 0.25 }' if way == "contrai-pruned" else ""
    recipe.write_text(RECIPE.format(main=main, prune=prune))
    steps = planned_steps(recipe.read_text(), str(recipe))
    args = trl.SFTConfig(output_dir=str(out / f"{way}-trainer"), per_device_train_batch_size=8,
                         per_device_eval_batch_size=16, max_steps=steps, max_length=SEQ, report_to=[],
                         save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True, learning_rate=1e-3,
                         warmup_steps=round(0.05 * steps), logging_steps=20)
    ds = lambda r: Dataset.from_list([{"input_ids": x} for x in r])  # noqa: E731
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=ds(train), eval_dataset=ds(val),
                             processing_class=tok)
    if way != "plain":
        ContraiCallback(recipe, run_dir=out / way, holdout_dataset=ds(holdout)).attach(trainer)
    t = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t
    if way == "plain":
        return model.merge_and_unload().eval(), seconds
    return AutoModelForCausalLM.from_pretrained(out / way / "final").eval(), seconds


def variants(name: str, model: Any, tok: Any, holdout: torch.Tensor, calib: torch.Tensor, out: Path,
             repeats: int) -> dict[str, Any]:
    """Perplexities, bytes and llama.cpp speeds of one final model."""

    def calibrate() -> None:
        each_pass(lambda row: model(input_ids=row), calib.split(8))

    dense = measure(model, holdout, None)
    dense.pop("_top")
    folder = out / f"{name}-hf"
    model.save_pretrained(folder)
    row: dict[str, Any] = {"intermediate_size": model.config.intermediate_size,
                           "perplexity": dense["perplexity"], "bytes": folder_bytes(folder / "model.safetensors")}
    for bits, cal in ((8, None), (4, calibrate)):
        with quantized_in_place(model, Scheme(bits, 32), cal) as q:
            got = measure(model, holdout, None)
            top = got.pop("_top")
            gguf = out / f"{name}-q{bits}_0.gguf"
            write_gguf(model, q, tok, gguf)
            row[f"int{bits}"] = {"perplexity": got["perplexity"], "gguf_bytes": folder_bytes(gguf),
                                 **llama_cpp_run(gguf, holdout, top, repeats)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="JSONL with a 'text' field (SpamAssassin)")
    ap.add_argument("out", type=Path, help="folder for the runs and exports")
    ap.add_argument("--main", type=int, default=60, help="main's steps (the whole plan is main / 0.6)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--speed", action="store_true", help="time the GGUF files in OUT_DIR only")
    ap.add_argument("--ways", nargs="+", default=WAYS, choices=WAYS, help="the fine-tunes to run")
    args = ap.parse_args()
    torch.set_num_threads(2)
    path = Path(os.environ["CONTRAI_LLM"])
    tok = AutoTokenizer.from_pretrained(path)
    texts = [json.loads(x)["text"] for x in args.data.read_text().split("\n") if x.strip()]
    # Train and validation from the file's first half, the holdout from its second.
    first = rows(tok, texts[:len(texts) // 2])
    train, val, calib = first[:640], first[640:704], torch.tensor(first[704:736])
    holdout = rows(tok, texts[len(texts) // 2:])[:64]
    if args.speed:
        ids = torch.tensor(holdout)
        for gguf in sorted(args.out.glob("*.gguf")):
            got = llama_cpp_run(gguf, ids[:1], torch.zeros(1, SEQ, dtype=torch.long), args.repeats)
            print(gguf.name, {k: round(v, 1) for k, v in got.items() if k.endswith("per_s")}, flush=True)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    for way in args.ways:
        model, seconds = fine_tune(way, path, tok, train, val, holdout, args.out, args.main)
        report[way] = {"train_s": seconds} | variants(way, model, tok, torch.tensor(holdout), calib, args.out,
                                                      args.repeats)
        print(way, json.dumps(report[way]), flush=True)
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
