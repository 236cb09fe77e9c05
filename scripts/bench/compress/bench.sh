#!/usr/bin/env bash
# Dense vs pruned (50 % of the prunable weights) vs int8 vs student, on the built-in default and
# on ../shared/data/spamassassin.jsonl: holdout accuracy, parameters, bytes on disk, CPU latency
# (`contrai compress`), with PyTorch's torch.nn.utils.prune (global L1 unstructured, same sparsity,
# same architecture and weights, same fine-tuning steps, same data) as the quality anchor.
#
#   bash scripts/bench/compress/bench.sh     # SEEDS="42" by default; OUT=/tmp/contrai-compress
#
# The dense model is a plain run (main alone, the controller off, the lifecycle's total budget) so
# that no contraction has pruned it before. Needs a venv with torch and safetensors:
# PY=~/.cache/contrai-torch/bin/python (../shared/anchors/setup-venv.sh, then pip install safetensors).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${OUT:-/tmp/contrai-compress}"
SEEDS="${SEEDS:-42}"
STEPS="${STEPS:-100}"
PY="${PY:-$HOME/.cache/contrai-torch/bin/python}"
SPAM="$ROOT/../shared/data/spamassassin.jsonl"
(cd "$ROOT" && cargo build --release -q -p contrai-cli && cargo build --release -q --example export_tokens -p contrai-train)
rm -rf "$OUT"; mkdir -p "$OUT/bin"
cp "$ROOT/target/release/contrai" "$ROOT/target/release/examples/export_tokens" "$OUT/bin/"
BIN="$OUT/bin/contrai"
echo "contrai $(git -C "$ROOT" rev-parse --short HEAD); $(nproc) cores; $("$PY" -c 'import torch;print("torch", torch.__version__)')"
datasets=(default)
[[ -f "$SPAM" ]] && datasets+=(spamassassin) || echo "skipping spamassassin: $SPAM is absent"

printf '\n| data | seed | model | holdout acc | Δ vs dense (pts) | params | zero weights | bytes | size ratio | CPU ms / batch 32 | speed-up |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n' > "$OUT/table.md"
for ds in "${datasets[@]}"; do
  data_line=""; [[ $ds == spamassassin ]] && data_line="path = \"$SPAM\""
  for seed in $SEEDS; do
    d="$OUT/$ds-$seed"; mkdir -p "$d"
    printf '[run]\nname = "dense"\nseed = %s\nphases = ["main"]\n[main]\nsteps = 533\n[guards]\nenabled = false\n[data]\n%s\n' "$seed" "$data_line" > "$d/dense.toml"
    "$BIN" train "$d/dense.toml" --out "$d" > "$d/train.log" 2>&1
    "$BIN" compress "$d/dense" --prune 0.5 --steps "$STEPS" --int8 --distill --json > "$d/compress.json" 2> "$d/compress.log"
    "$OUT/bin/export_tokens" "$d/dense" "$d/tokens.json"
    "$PY" "$ROOT/scripts/bench/compress/torch_prune.py" "$d/dense/compress/source.safetensors" "$d/tokens.json" \
      --sparsity 0.5 --steps "$STEPS" --lr 5e-5 --batch 32 --seed "$seed" > "$d/torch.json"
    python3 - "$d" "$ds" "$seed" >> "$OUT/table.md" <<'PY'
import json, sys
d, ds, seed = sys.argv[1:]
c = json.load(open(f"{d}/compress.json"))
t = json.load(open(f"{d}/torch.json"))
dense = c["variants"][0]
for v in c["variants"]:
    print(f"| {ds} | {seed} | {v['name']} | {100*v['holdout_accuracy']:.2f} % | {100*(v['holdout_accuracy']-dense['holdout_accuracy']):+.2f} "
          f"| {v['parameters']:,} | {100*v['zero_weights']:.1f} % | {v['bytes']:,} | {dense['bytes']/v['bytes']:.2f}x "
          f"| {v['latency_ms']:.2f} | {dense['latency_ms']/v['latency_ms']:.2f}x |")
print(f"| {ds} | {seed} | PyTorch dense (same weights) | {100*t['dense']['holdout_accuracy']:.2f} % | — | | | | | | |")
print(f"| {ds} | {seed} | PyTorch global L1 50 % + {c['variants'][1]['note'].split('fine-tuned ')[1].split(' steps')[0]} steps | "
      f"{100*t['pruned']['holdout_accuracy']:.2f} % | {100*(t['pruned']['holdout_accuracy']-t['dense']['holdout_accuracy']):+.2f} | | {100*t['sparsity_of_prunable']:.0f} % of prunable | | | | |")
PY
    cat "$OUT/table.md"
  done
done
