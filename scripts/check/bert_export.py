"""Export round trip of a pretrained fine-tune: ``RUN_DIR/final/hf`` loaded the standard way
(``AutoModelForSequenceClassification.from_pretrained(..., trust_remote_code=True)``, then
``model(**enc)``) gives the probabilities ``contrai predict`` gives on the same texts, within
1e-4. Run by hand (needs torch and transformers); BENCHMARKS.md records the result.

    python scripts/check/bert_export.py RUN_DIR [--contrai target/release/contrai] [--file FILE]

FILE defaults to the run's holdout partition (``RUN_DIR/data/holdout.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import tomllib
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path)
    p.add_argument("--contrai", default="target/release/contrai")
    p.add_argument("--file", type=Path)
    a = p.parse_args()
    recipe = tomllib.loads((a.run / "recipe.toml").read_text())
    seq = recipe["model"]["seq_len"]
    field = recipe.get("data", {}).get("text", "text")
    file = a.file or a.run / "data" / "holdout.jsonl"
    rows = [json.loads(x) for x in file.read_text().splitlines() if x.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "p.jsonl"
        subprocess.run([a.contrai, "predict", str(a.run), str(file), "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
        ours = [json.loads(x) for x in out.read_text().splitlines()]
    hf = a.run / "final" / "hf"
    # The standard path: a mean-pooled export brings its modeling file (config.json's auto_map).
    model = AutoModelForSequenceClassification.from_pretrained(hf, trust_remote_code=True).eval()
    tok = AutoTokenizer.from_pretrained(hf)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    worst, agree = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(rows), 64):
            chunk = rows[start:start + 64]
            enc = tok([r[field] for r in chunk], truncation=True, max_length=seq, padding="max_length",
                      return_tensors="pt")
            logits = model(**enc).logits
            probs = torch.softmax(logits, -1)
            for i, row in enumerate(ours[start:start + 64]):
                theirs = {labels[j]: float(probs[i, j]) for j in range(len(labels))}
                worst = max(worst, max(abs(theirs[k] - v) for k, v in row["probabilities"].items()))
                agree += max(theirs, key=theirs.get) == row["label"]
    pooling = "mean" if model.config.architectures[0].startswith("Contrai") else "cls"
    print(json.dumps({"run": str(a.run), "samples": len(rows), "pooling": pooling,
                      "max_abs_prob_diff": worst, "same_label": agree, "within_1e-4": worst < 1e-4}))


if __name__ == "__main__":
    main()
