#!/usr/bin/env bash
# The built-in default run's pace against step_profile's step on the same machine, alternating run
# by run; medians. Figures: the run's own pace line (after its first 20 main steps) and its whole-
# run ms a step; step_profile's median step on random tokens and on the default run's real batches
# (`--real`), with denormals flushed and kept (`--denormals keep`).
#
#   bash scripts/bench/train/default_run.sh        # RUNS=3 STEPS=60
#   BASE=/path/to/older/contrai bash scripts/bench/train/default_run.sh   # that binary's run too
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
RUNS="${RUNS:-3}"
STEPS="${STEPS:-60}"
(cd "$ROOT" && cargo build --release -q -p contrai-cli && cargo build --release -q -p contrai-train --example step_profile)
BIN="$ROOT/target/release/contrai"
EX="$ROOT/target/release/examples/step_profile"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), flags: $(grep -o 'avx[0-9a-z_]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "contrai $(git -C "$ROOT" rev-parse --short HEAD)${BASE:+, base $BASE}"

# One default run: "PACE WHOLE" in ms a step.
run() {
  rm -rf "$TMP/run"; "$1" train --out "$TMP/run" > "$TMP/log" 2>&1
  local pace whole
  pace=$(sed -n 's/^pace: \([0-9.]*\) ms a step.*/\1/p' "$TMP/log" | head -1)
  whole=$(sed -n 's/.* steps (of .*(\([0-9.]*\) ms a step.*/\1/p' "$TMP/log" | head -1)
  echo "$pace $whole"
}
profile() { "$EX" "$STEPS" "$@" 2>/dev/null | sed -n 's/^  median *\([0-9.]*\) ms/\1/p'; }

declare -A col
add() { col[$1]="${col[$1]:-} $2"; }
for i in $(seq "$RUNS"); do
  read -r p w < <(run "$BIN"); add pace "$p"; add whole "$w"
  if [ -n "${BASE:-}" ]; then read -r p w < <(run "$BASE"); add base_pace "$p"; add base_whole "$w"; fi
  add random "$(profile)"; add real "$(profile --real)"; add real_keep "$(profile --real --denormals keep)"
  echo "run $i:$(for k in pace whole base_pace base_whole random real real_keep; do [ -n "${col[$k]:-}" ] && printf ' %s=%s' "$k" "${col[$k]##* }"; done)"
done
median() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo; echo "| figure | ms a step (median of $RUNS) |"; echo "|---|---:|"
for k in pace whole base_pace base_whole random real real_keep; do
  [ -n "${col[$k]:-}" ] && echo "| $k | $(median "${col[$k]}") |"
done
awk -v p="$(median "${col[pace]}")" -v r="$(median "${col[real]}")" 'BEGIN { printf "\npace / step_profile --real: %.2f\n", p / r }'
