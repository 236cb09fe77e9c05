#!/usr/bin/env bash
# Pruning that pays: the default transformer (a dense plain run) pruned 30 % by whole attention
# heads and whole feed-forward units, the pruned structure removed from the exported matrices,
# against the same share pruned by single weights (same size and speed as dense), and the int8
# models (int8 arithmetic); bytes on disk,
# parameters, holdout accuracy and CPU latency (batch 32, every variant timed side by side in one
# process by `contrai compress`).
#
#   bash scripts/bench/compress/structured.sh      # SEEDS="42" by default; OUT=/tmp/contrai-structured
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${OUT:-/tmp/contrai-structured}"
SEEDS="${SEEDS:-42}"
STEPS="${STEPS:-100}"
SHARE="${SHARE:-0.3}"
(cd "$ROOT" && cargo build --release -q -p contrai-cli)
rm -rf "$OUT"; mkdir -p "$OUT/bin"
cp "$ROOT/target/release/contrai" "$OUT/bin/"
BIN="$OUT/bin/contrai"
echo "contrai $(git -C "$ROOT" rev-parse --short HEAD); $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), avx512f: $(grep -c -m1 avx512f /proc/cpuinfo || true)"
printf '\n| seed | model | holdout acc | params | bytes | CPU ms / batch 32 | latency vs dense | note |\n|---:|---|---:|---:|---:|---:|---:|---|\n' > "$OUT/table.md"
for seed in $SEEDS; do
  d="$OUT/$seed"; mkdir -p "$d"
  printf '[run]\nname = "dense"\nseed = %s\nphases = ["main"]\n[main]\nsteps = 533\n[guards]\nenabled = false\n' "$seed" > "$d/dense.toml"
  "$BIN" train "$d/dense.toml" --out "$d" > "$d/train.log" 2>&1
  "$BIN" compress "$d/dense" --prune "$SHARE" --scope module --steps "$STEPS" --int8 --json > "$d/single.json" 2> "$d/single.log"
  "$BIN" compress "$d/dense" --prune "$SHARE" --heads --units --steps "$STEPS" --json > "$d/whole.json" 2> "$d/whole.log"
  python3 - "$d" "$seed" >> "$OUT/table.md" <<'PY'
import json, sys
d, seed = sys.argv[1:]
for f, label in (("single", "single weights"), ("whole", "whole heads + units")):
    c = json.load(open(f"{d}/{f}.json"))
    dense, pruned = c["variants"][0], c["variants"][1]
    if f == "single":
        print(f"| {seed} | dense | {100*dense['holdout_accuracy']:.2f} % | {dense['parameters']:,} | {dense['bytes']:,} | {dense['latency_ms']:.2f} | 1.00 | |")
        for v in c["variants"][2:]:
            print(f"| {seed} | {v['name']} | {100*v['holdout_accuracy']:.2f} % | {v['parameters']:,} | {v['bytes']:,} "
                  f"| {v['latency_ms']:.2f} | {v['latency_ms']/dense['latency_ms']:.2f} | {v['note']} |")
    print(f"| {seed} | pruned 30 %, {label} | {100*pruned['holdout_accuracy']:.2f} % | {pruned['parameters']:,} | {pruned['bytes']:,} "
          f"| {pruned['latency_ms']:.2f} | {pruned['latency_ms']/dense['latency_ms']:.2f} (dense {dense['latency_ms']:.2f} in the same process) | {pruned['note']} |")
PY
  cat "$OUT/table.md"
done
