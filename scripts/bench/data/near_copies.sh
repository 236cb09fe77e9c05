#!/usr/bin/env bash
# Near-copy recall by text length (contrai before and after the edit rule, datasketch, rensa,
# text-dedup on the same planted pairs), and the audit's throughput before and after.
#
#   BEFORE=/path/to/old/contrai bash scripts/bench/data/near_copies.sh
#
# Environment (all optional):
#   BEFORE    a contrai binary built before the change (its recall and time are shown beside)
#   TD_PY     Python with text-dedup 0.4 (default ~/.cache/contrai-textdedup/bin/python)
#   RUNS      timed runs of each binary on each file, alternated (default 7)
#   PER_BAND  originals per length band (default 300; two copies each)
#   plus PY, WORK, SA, BASE as in env.sh. SKIP_BUILD=1 uses target/release/contrai as it is.
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

TD_PY="${TD_PY:-$HOME/.cache/contrai-textdedup/bin/python}"
RUNS="${RUNS:-7}"
PER_BAND="${PER_BAND:-300}"
OUT="$WORK/near-copies"
mkdir -p "$OUT"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  (cd "$ROOT" && cargo build --release -p contrai-cli) >&2
fi
cp "$ROOT/target/release/contrai" "$WORK/contrai-after"
AFTER="$WORK/contrai-after"

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'), machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), flags: $(grep -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "contrai: HEAD $(git -C "$ROOT" rev-parse --short HEAD), $(git -C "$ROOT" status --porcelain -- crates | wc -l) changed file(s) under crates/"

"$PY" "$HERE/near_copies.py" make "$SA" "$OUT" --per-band "$PER_BAND"
clusters_of_contrai() { # binary -> clusters.json
  "$1" data audit "$OUT/planted.jsonl" --json 2>/dev/null > "$OUT/audit.json" || [ $? -eq 1 ]
  "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); json.dump([c["ids"] for c in r["clusters"]], open(sys.argv[2], "w"))' \
    "$OUT/audit.json" "$2"
}
echo
echo "| tool | $(for b in "8–15" "15–30" "30–60" "60–120" "120–400"; do printf '%s one word | %s 5 %% | ' "$b" "$b"; done)"
echo "|---|$(printf -- '---:|%.0s' $(seq 10))"
if [ -n "${BEFORE:-}" ]; then
  clusters_of_contrai "$BEFORE" "$OUT/before.json"
  "$PY" "$HERE/near_copies.py" score "$OUT" "Contrai before" "$OUT/before.json"
fi
clusters_of_contrai "$AFTER" "$OUT/after.json"
"$PY" "$HERE/near_copies.py" score "$OUT" "**Contrai**" "$OUT/after.json"
for impl in datasketch rensa; do
  "$PY" "$HERE/datasketch_audit.py" "$OUT/planted.jsonl" --impl "$impl" --out "$OUT/$impl.json" > /dev/null
  "$PY" "$HERE/near_copies.py" score "$OUT" "$impl (J ≥ 0.8, 23 × 11)" "$OUT/$impl.json"
done
if [ -x "$TD_PY" ]; then
  "$TD_PY" "$HERE/textdedup_audit.py" "$OUT/planted.jsonl" --out "$OUT/textdedup.json" > /dev/null
  "$PY" "$HERE/near_copies.py" score "$OUT" "text-dedup (its defaults)" "$OUT/textdedup.json"
fi

# Throughput: the same audits, the binaries alternated run by run, medians.
BIG="$WORK/demo-$BASE.jsonl"
[ -s "$BIG" ] || "$AFTER" data demo --out "$BIG" --base "$BASE" >&2
[ -n "${BEFORE:-}" ] || exit 0
echo
echo "| data | before: median wall s | after: median wall s | after / before | before: peak RSS MB | after: peak RSS MB |"
echo "|---|---:|---:|---:|---:|---:|"
for f in "$SA" "$BIG"; do
  : > "$OUT/times-before.txt"
  : > "$OUT/times-after.txt"
  for _ in $(seq "$RUNS"); do
    for which in before after; do
      bin=$BEFORE
      [ "$which" = after ] && bin=$AFTER
      /usr/bin/time -f '%e %M' -o "$OUT/t" "${CLEAN[@]}" "$bin" data audit "$f" --json > /dev/null 2>&1 || true
      cat "$OUT/t" >> "$OUT/times-$which.txt"
    done
  done
  "$PY" - "$f" "$OUT/times-before.txt" "$OUT/times-after.txt" <<'EOF'
import statistics, sys, os
# GNU time writes "Command exited with non-zero status 1" first when the audit finds problems.
med = lambda path, col: statistics.median(float(l.split()[col]) for l in open(path) if l[:1].isdigit())
b, a = med(sys.argv[2], 0), med(sys.argv[3], 0)
print(f"| {os.path.basename(sys.argv[1])} | {b:.2f} | {a:.2f} | {a / b:.2f}× | {med(sys.argv[2], 1) / 1024:.0f} | {med(sys.argv[3], 1) / 1024:.0f} |")
EOF
done
