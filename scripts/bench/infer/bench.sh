#!/usr/bin/env bash
# Int8 inference against f32 on the default transformer (batch 32, seq 128, 2 threads):
# Contrai (`infer_profile`: the f32 model and its int8 model, interleaved) and PyTorch
# (torch_int8.py: the same architecture in f32 and under quantize_dynamic), alternating run by
# run; medians over runs.
#
#   bash scripts/bench/infer/bench.sh        # RUNS=5 by default
#
# Needs a venv with torch: TORCH_PY (default ~/.cache/contrai-py/bin/python).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PY="${TORCH_PY:-$HOME/.cache/contrai-py/bin/python}"
RUNS="${RUNS:-5}"
(cd "$ROOT" && cargo build --release -q --example infer_profile -p contrai-train)
EX="$ROOT/target/release/examples/infer_profile"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), avx512f: $(grep -c -m1 avx512f /proc/cpuinfo || true); $("$PY" -c 'import torch; print("torch", torch.__version__)'); contrai $(git -C "$ROOT" rev-parse --short HEAD)"
cf=(); ci=(); tf=(); ti=()
for i in $(seq "$RUNS"); do
  out=$("$EX" 30); echo "run $i contrai: $out"
  cf+=("$(echo "$out" | sed -n 's/^f32 \([0-9.]*\) ms.*/\1/p')"); ci+=("$(echo "$out" | sed -n 's/.*int8 \([0-9.]*\) ms a batch.*/\1/p')")
  out=$("$PY" "$ROOT/scripts/bench/infer/torch_int8.py" --runs 30 | grep RESULT); echo "run $i torch:   $out"
  tf+=("$(echo "$out" | sed -n 's/.*f32 \([0-9.]*\) ms.*/\1/p')"); ti+=("$(echo "$out" | sed -n 's/.*int8 \([0-9.]*\) ms a batch.*/\1/p')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
awk -v cf="$(median "${cf[@]}")" -v ci="$(median "${ci[@]}")" -v tf="$(median "${tf[@]}")" -v ti="$(median "${ti[@]}")" 'BEGIN {
  printf "\n| framework | f32 ms / batch 32 | int8 ms / batch 32 | int8 / f32 |\n|---|---:|---:|---:|\n";
  printf "| Contrai | %.2f | %.2f | %.2f |\n| PyTorch (quantize_dynamic) | %.2f | %.2f | %.2f |\n", cf, ci, ci/cf, tf, ti, ti/tf;
  printf "\nContrai int8 against PyTorch int8: %.2fx faster; Contrai f32 against PyTorch f32: %.2fx\n", ti/ci, tf/cf }'
