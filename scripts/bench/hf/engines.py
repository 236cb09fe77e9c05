"""MiniLM-L6 fine-tuned on SpamAssassin by Contrai's engine and by Hugging Face Trainer, full and LoRA.

Benchmark only (run by hand; BENCHMARKS.md quotes its output). One split (`contrai data split`,
seed 42) serves both engines. For each seed and mode (full, lora) the same fine-tune runs twice:
`contrai train` on a recipe of the main phase alone, and `Trainer` (with PEFT for LoRA) — the same
tokenizer and max length, steps, batch, peak LR, 6 % warmup then a linear decay to 0, weight decay
0.01, clipping at 1.0, dropout 0.1, the [CLS] pooler and a fresh head; LoRA rank 8, alpha 16 on
query and value, the pooler frozen, the head trained. Each run is its own process: printed are
holdout accuracy, the whole process's wall time (loading, tokenising, training, the holdout read;
Contrai's also its data checks, evaluation on val and exports), the mean training step and the
process's peak resident memory.

    python scripts/bench/hf/engines.py --contrai target/release/contrai --model DIR \
        --data ../shared/data/spamassassin.jsonl --out /tmp/engines --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

RECIPE = """
[run]
name = "{name}"
seed = {seed}
phases = ["main"]
eval_every = {steps}
checkpoint_every = {steps}
[model]
kind = "bert"
pretrained = "{model}"
pooling = "cls"
seq_len = {seq}
dropout = 0.1
{lora}
[main]
steps = {steps}
batch = {batch}
lr = {lr}
min_lr = 0.0
warmup = 0.06
schedule = "linear"
weight_decay = 0.01
clip_norm = 1.0
"""

LORA = '[model.lora]\nrank = 8\nalpha = 16.0\ntargets = ["query", "value"]'
LR = {"full": 5e-5, "lora": 5e-4}


def contrai_run(a, mode: str, seed: int) -> dict:
    name = f"contrai-{mode}-{seed}"
    recipe = a.out / f"{name}.toml"
    recipe.write_text(RECIPE.format(name=name, seed=seed, model=a.model, seq=a.seq, steps=a.steps,
                                    batch=a.batch, lr=LR[mode], lora=LORA if mode == "lora" else ""))
    shutil.rmtree(a.out / "runs" / name, ignore_errors=True)
    t0 = time.perf_counter()
    p = subprocess.run([a.contrai, "train", str(recipe), "--data", str(a.out / "split"), "--out",
                        str(a.out / "runs")], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{name} failed:\n{p.stderr[-3000:]}")
    step_ms = float(re.search(r"\(([\d.]+) ms a step", p.stderr).group(1))
    peak = float(re.search(r"peak memory ([\d.]+) GB", p.stderr).group(1))
    ev = json.loads((a.out / "runs" / name / "final" / "eval.json").read_text())
    return {"engine": "contrai", "mode": mode, "seed": seed, "holdout_accuracy": ev["holdout_accuracy"],
            "wall_s": round(wall, 1), "step_ms": step_ms, "peak_gb": peak}


def hf_run(a, mode: str, seed: int) -> dict:
    """Runs in a child process of its own (its peak memory is its own)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--hf-child", mode, str(seed), "--model", a.model, "--out",
                        str(a.out), "--seq", str(a.seq), "--steps", str(a.steps), "--batch", str(a.batch)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"hf {mode} {seed} failed:\n{p.stderr[-3000:]}")
    row = json.loads(p.stdout.strip().splitlines()[-1])
    return {**row, "wall_s": round(time.perf_counter() - t0, 1)}


def hf_child(a, mode: str, seed: int) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainerCallback, \
        TrainingArguments

    class Timing(TrainerCallback):
        def __init__(self) -> None:
            self.t0, self.steps = 0.0, []

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.steps.append((time.perf_counter() - self.t0) * 1e3)

    split = a.out / "split"
    manifest = json.loads((split / "manifest.json").read_text())
    tok = AutoTokenizer.from_pretrained(a.model)
    classes = ["ham", "spam"]  # Contrai's class order: sorted names

    def load(name: str) -> list[dict]:
        part = next(p for p in manifest["partitions"] if p["name"] == name)
        rows = [json.loads(x) for x in (split / part["file"]).read_text().split("\n") if x.strip()]
        enc = tok([r["text"] for r in rows], truncation=True, max_length=a.seq, padding="max_length",
                  return_tensors="pt")
        labels = torch.tensor([classes.index(r["label"]) for r in rows])
        return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
                 "token_type_ids": enc["token_type_ids"][i], "labels": labels[i]} for i in range(len(rows))]

    train, hold = load("train"), load("holdout")
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(a.model, num_labels=2)
    if mode == "lora":
        from peft import LoraConfig, TaskType, get_peft_model
        model = get_peft_model(model, LoraConfig(task_type=TaskType.SEQ_CLS, r=8, lora_alpha=16, lora_dropout=0.0,
                                                 target_modules=["query", "value"]))
    args = TrainingArguments(output_dir=str(a.out / f"hf-{mode}-{seed}"), per_device_train_batch_size=a.batch,
                             per_device_eval_batch_size=64, max_steps=a.steps, learning_rate=LR[mode],
                             warmup_steps=round(0.06 * a.steps), lr_scheduler_type="linear", weight_decay=0.01,
                             max_grad_norm=1.0, report_to=[], save_strategy="no", eval_strategy="no", use_cpu=True,
                             seed=seed, disable_tqdm=True, logging_steps=50)
    timing = Timing()
    trainer = Trainer(model=model, args=args, train_dataset=train, callbacks=[timing])
    trainer.train()
    pred = trainer.predict(hold)
    acc = float((pred.predictions.argmax(-1) == pred.label_ids).mean())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(json.dumps({"engine": "hf", "mode": mode, "seed": seed, "holdout_accuracy": acc,
                      "step_ms": round(statistics.mean(timing.steps), 1), "peak_gb": round(peak, 2)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contrai", help="the contrai binary (release build)")
    p.add_argument("--model", required=True, help="the unzipped all-MiniLM-L6-v2 model directory")
    p.add_argument("--data", help="spamassassin.jsonl")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--modes", nargs="+", default=["full", "lora"])
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--hf-child", nargs=2, metavar=("MODE", "SEED"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.hf_child:
        return hf_child(a, a.hf_child[0], int(a.hf_child[1]))
    a.out.mkdir(parents=True, exist_ok=True)
    if not (a.out / "split" / "manifest.json").exists():
        subprocess.run([a.contrai, "data", "split", a.data, "--out", str(a.out / "split"), "--seed", "42"],
                       check=True, capture_output=True)
    results = []
    for seed in a.seeds:
        for mode in a.modes:
            for engine in (contrai_run, hf_run):
                row = engine(a, mode, seed)
                results.append(row)
                print(json.dumps(row), flush=True)
    (a.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
