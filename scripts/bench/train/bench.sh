#!/usr/bin/env bash
# Training throughput of the default transformer (vocab 8192, seq 128, batch 32, d_model 128,
# 2 pre-LN blocks, 4 heads, FFN 512, dropout 0.1, AdamW, f32, 2 threads): Contrai on Burn's
# flex CPU backend against PyTorch (../shared/anchors/torch_transformer_bench.py), side by side,
# alternating run by run; medians over runs of each run's per-step time.
#
#   bash scripts/bench/train/bench.sh            # RUNS=5 STEPS=30 by default
#
# Needs a venv with torch: TORCH_PY (default ~/.cache/contrai-torch/bin/python), made with
# `python3 -m venv ~/.cache/contrai-torch && ~/.cache/contrai-torch/bin/pip install torch numpy`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PY="${TORCH_PY:-$HOME/.cache/contrai-torch/bin/python}"
ANCHOR="${ANCHOR:-$ROOT/../shared/anchors/torch_transformer_bench.py}"
RUNS="${RUNS:-5}"
STEPS="${STEPS:-30}"
GFLOP_PER_STEP=11.3   # ../shared/DESIGN.md §5: one training step of this model
CLEAN=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)

(cd "$ROOT" && cargo build --release -q --example step_profile -p contrai-train)
EX="$ROOT/target/release/examples/step_profile"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $("$PY" -c 'import torch; print("torch", torch.__version__)'); contrai $(git -C "$ROOT" rev-parse --short HEAD)"

c=(); t=()
for i in $(seq "$RUNS"); do
  ms=$("${CLEAN[@]}" "$EX" "$STEPS" | sed -n 's/.* steps, \([0-9.]*\) ms a step/\1/p')
  c+=("$ms"); echo "run $i: contrai $ms ms/step"
  ms=$("${CLEAN[@]}" "$PY" "$ANCHOR" --mode train --threads 2 --steps "$STEPS" --warmup 3 | sed -n 's/^RESULT torch train.*median_ms=\([0-9.]*\).*/\1/p' | head -1)
  t+=("$ms"); echo "run $i: torch   $ms ms/step"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mc=$(median "${c[@]}"); mt=$(median "${t[@]}")
awk -v c="$mc" -v t="$mt" -v g="$GFLOP_PER_STEP" 'BEGIN {
  printf "\n| framework | ms a step (median of runs) | samples/s | achieved GFLOP/s |\n|---|---:|---:|---:|\n";
  printf "| Contrai (Burn flex) | %.1f | %.0f | %.0f |\n", c, 32000/c, g*1000/c;
  printf "| PyTorch | %.1f | %.0f | %.0f |\n", t, 32000/t, g*1000/t;
  printf "\nContrai / PyTorch throughput: %.2fx\n", t/c }'
echo; echo "Contrai step breakdown:"; "${CLEAN[@]}" "$EX" "$STEPS"
echo; echo "PyTorch phases and matmul peak:"
"${CLEAN[@]}" "$PY" "$ANCHOR" --mode phases --threads 2 --steps "$STEPS" --warmup 3 | grep RESULT || true
"${CLEAN[@]}" "$PY" "$ANCHOR" --mode matmul --threads 2 | grep RESULT || true
