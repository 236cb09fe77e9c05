#!/usr/bin/env bash
# Where the time goes, and how much recall moves with the hash family alone.
# Run after bench.sh (it reuses $WORK/contrai, the demo file and the cached ground truth).
#
#   bash scripts/bench/data/diag.sh
#
# 1. Contrai with --num-perm 16 / 64 / 256, with RAYON_NUM_THREADS=1 (one core, as the Python
#    anchors use), and the Python floor (`--impl none`: read, normalise, shingle, no sketches),
#    alternating, medians of $RUNS runs.
# 2. perf profile of Contrai on the demo file (if perf is installed).
# 3. Recall of rensa and datasketch with other MinHash seeds (same banding), to show the spread
#    that comes from the choice of hash family alone.
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
RUNS="${RUNS:-5}"
BIG="$WORK/demo-$BASE.jsonl"
CONTRAI="$WORK/contrai"
[ -x "$CONTRAI" ] && [ -s "$BIG" ] || { echo "run bench.sh first" >&2; exit 1; }

med() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
declare -A T
run() { # name, then the command
  local name=$1; shift
  /usr/bin/time -f '%e %U %S' -o "$WORK/diag.time" "$@" > /dev/null 2>&1 || true
  T[$name]+="$(tail -1 "$WORK/diag.time")"$'\n'
}
for f in "$BIG"; do
  for ((r = 1; r <= RUNS; r++)); do
    run np256 "${CLEAN[@]}" "$CONTRAI" data audit "$f" --json
    run np64 "${CLEAN[@]}" "$CONTRAI" data audit "$f" --json --num-perm 64
    run np16 "${CLEAN[@]}" "$CONTRAI" data audit "$f" --json --num-perm 16
    run np256_1thread "${CLEAN[@]}" RAYON_NUM_THREADS=1 "$CONTRAI" data audit "$f" --json
    run py_floor "${CLEAN[@]}" "$PY" "$HERE/datasketch_audit.py" "$f" --impl none
  done
  echo "### $(basename "$f"): medians of $RUNS alternating runs"
  echo
  echo "| run | wall s | CPU s (user+sys) |"
  echo "|---|---:|---:|"
  for k in np256 np64 np16 np256_1thread py_floor; do
    w=$(printf '%s' "${T[$k]}" | awk 'NF {print $1}' | med)
    c=$(printf '%s' "${T[$k]}" | awk 'NF {print $2 + $3}' | med)
    echo "| $k | $w | $c |"
  done
  echo
done

if command -v perf > /dev/null; then
  echo "### perf: Contrai on $(basename "$BIG") (self time, top symbols)"
  echo
  echo '```'
  perf record -q -o "$WORK/perf.data" "$CONTRAI" data audit "$BIG" --json > /dev/null 2>&1 || true
  perf report -i "$WORK/perf.data" --no-children --sort sym --stdio -g none 2> /dev/null | grep '%' > "$WORK/perf.txt" || true
  head -15 "$WORK/perf.txt"
  echo '```'
  echo
fi

echo "### Recall with other MinHash seeds (same 23 x 11 banding)"
echo
for name in sa big; do
  f=$SA; [ $name = big ] && f=$BIG
  tools=()
  for seed in 1 2 3 4 5; do
    "${CLEAN[@]}" "$PY" "$HERE/datasketch_audit.py" "$f" --impl rensa --seed $seed --out "$WORK/diag-$name-rensa-$seed.json" 2> /dev/null
    tools+=(--tool "rensa-seed$seed=$WORK/diag-$name-rensa-$seed.json")
  done
  for seed in 2 3; do
    "${CLEAN[@]}" "$PY" "$HERE/datasketch_audit.py" "$f" --impl datasketch --seed $seed --out "$WORK/diag-$name-ds-$seed.json" 2> /dev/null
    tools+=(--tool "datasketch-seed$seed=$WORK/diag-$name-ds-$seed.json")
  done
  echo "$name:"
  echo '```'
  "${CLEAN[@]}" "$PY" "$HERE/recall.py" "$f" --cache "$WORK/gt-$name.json" "${tools[@]}" 2> /dev/null | sed 's/ missed_by_bin.*//'
  echo '```'
done
