#!/usr/bin/env bash
# Contrai `data audit` against datasketch 2.0 and rensa 0.5 (near-duplicate clustering).
#
#   bash scripts/bench/data/bench.sh
#
# Environment (all optional):
#   PY        Python with datasketch, rensa, numpy  (default ~/.cache/contrai-anchors-lite/bin/python)
#   WORK      scratch folder for data and outputs   (default ${TMPDIR:-/tmp}/contrai-bench-data)
#   SA        SpamAssassin JSONL                    (default ../shared/data/spamassassin.jsonl beside the repository)
#   BASE      `contrai data demo --base`            (default 86500, i.e. 100,072 documents)
#   RUNS_SA   timed runs a tool on SpamAssassin     (default 7)
#   RUNS_BIG  timed runs a tool on the demo file    (default 5)
#   SKIP_BUILD=1 to use target/release/contrai as it is.
#
# Each timed run is `/usr/bin/time -f '%e %U %S %M'` around the exact command line below; the
# tools alternate run by run (contrai, datasketch, rensa, contrai, ...), and the table shows
# medians. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for every command. Recall is computed
# against the exact ground truth of recall.py (all pairs of distinct texts with Jaccard >= 0.8),
# from one further, untimed run of each tool that writes its clusters.
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

RUNS_SA="${RUNS_SA:-7}"
RUNS_BIG="${RUNS_BIG:-5}"
CONTRAI="$ROOT/target/release/contrai"
TIME=(/usr/bin/time -f '%e %U %S %M')

[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install -y time" >&2; exit 1; }
mkdir -p "$WORK"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  (cd "$ROOT" && cargo build --release -p contrai-cli) >&2
fi
# Benchmark a copy, so a rebuild of target/ during the run cannot change the binary under test.
cp "$CONTRAI" "$WORK/contrai"
CONTRAI="$WORK/contrai"
{
  dirty=$(git -C "$ROOT" --no-optional-locks status --porcelain -- crates/contrai-data crates/contrai-cli | wc -l)
  echo "contrai: $("$CONTRAI" --version), HEAD $(git -C "$ROOT" rev-parse --short HEAD)," \
    "last contrai-data commit $(git -C "$ROOT" log -1 --format='%h %s' -- crates/contrai-data)," \
    "$dirty uncommitted file(s) in contrai-data/contrai-cli" \
    "(diff sha256 $(git -C "$ROOT" diff HEAD -- crates/contrai-data crates/contrai-cli | sha256sum | cut -c1-12))"
  echo "python: $("$PY" -c 'import sys, datasketch, rensa, numpy; from importlib.metadata import version as v; print(sys.version.split()[0], "datasketch", v("datasketch"), "rensa", v("rensa"), "numpy", numpy.__version__)')"
  echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/ {print $2}') GiB RAM, $(uname -r)"
  date -u +"date: %Y-%m-%d %H:%M UTC"
} > "$WORK/versions.txt"
BIG="$WORK/demo-$BASE.jsonl"
[ -s "$BIG" ] || "$CONTRAI" data demo --out "$BIG" --base "$BASE" >&2

TOOLS=(contrai datasketch rensa)

# One timed run: appends "tool wall user sys maxrss_kb inner_s" to $WORK/times-<name>.txt.
# These are the exact command lines timed ($f is the input file).
timed() {
  local name=$1 tool=$2 f=$3 err="$WORK/last.err" tf="$WORK/last.time"
  case $tool in
    # `contrai data audit` exits 1 when it finds problems (here: duplicates); that is success.
    contrai)    "${TIME[@]}" -o "$tf" "${CLEAN[@]}" "$CONTRAI" data audit "$f" --json > /dev/null 2> "$err" || [ $? -eq 1 ] ;;
    datasketch) "${TIME[@]}" -o "$tf" "${CLEAN[@]}" "$PY" "$HERE/datasketch_audit.py" "$f" --impl datasketch > /dev/null 2> "$err" ;;
    rensa)      "${TIME[@]}" -o "$tf" "${CLEAN[@]}" "$PY" "$HERE/datasketch_audit.py" "$f" --impl rensa > /dev/null 2> "$err" ;;
  esac
  local inner
  inner=$(sed -n 's/.* seconds=\([0-9.]*\).*/\1/p' "$err")
  echo "$tool $(tail -1 "$tf") ${inner:--}" >> "$WORK/times-$name.txt"
}

bench() {
  local name=$1 f=$2 runs=$3
  rm -f "$WORK/times-$name.txt"
  for ((r = 1; r <= runs; r++)); do
    for t in "${TOOLS[@]}"; do
      timed "$name" "$t" "$f"
      echo "  $name run $r/$runs: $(tail -1 "$WORK/times-$name.txt")" >&2
    done
  done
}

clusters() {
  local name=$1 f=$2
  "${CLEAN[@]}" "$CONTRAI" data audit "$f" --json > "$WORK/$name-contrai.json" || [ $? -eq 1 ]
  for impl in datasketch rensa; do
    "${CLEAN[@]}" "$PY" "$HERE/datasketch_audit.py" "$f" --impl "$impl" --out "$WORK/$name-$impl.json" 2>> "$WORK/anchor-$name.log"
  done
  "${CLEAN[@]}" "$PY" "$HERE/recall.py" "$f" --cache "$WORK/gt-$name.json" --json-out "$WORK/recall-$name.json" \
    --tool contrai="$WORK/$name-contrai.json" --tool datasketch="$WORK/$name-datasketch.json" \
    --tool rensa="$WORK/$name-rensa.json" > "$WORK/recall-$name.txt" 2> "$WORK/recall-$name.err"
}

echo "== timing SpamAssassin ($RUNS_SA alternating runs a tool)" >&2
bench sa "$SA" "$RUNS_SA"
echo "== timing demo --base $BASE ($RUNS_BIG alternating runs a tool)" >&2
bench big "$BIG" "$RUNS_BIG"
echo "== recall (exact ground truth)" >&2
clusters sa "$SA"
clusters big "$BIG"

sed 's/^/    /' "$WORK/versions.txt"
echo
"${CLEAN[@]}" "$PY" - "$WORK" "$SA" "$BIG" "$RUNS_SA" "$RUNS_BIG" <<'EOF'
import json, statistics, sys
work, sa, big, runs_sa, runs_big = sys.argv[1:]
def lines(path):
    return sum(1 for l in open(path, encoding="utf-8") if l.strip())
sets = [("sa", "SpamAssassin", sa, runs_sa), ("big", "demo (generated reviews)", big, runs_big)]
print("| data | docs | tool | runs | median wall s | docs/s (wall) | docs/s (work only) | median CPU s | peak RSS MB | recall J≥0.80 | recall J≥0.85 | clusters | × datasketch docs/s |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for key, label, path, runs in sets:
    docs = lines(path)
    rows = [l.split() for l in open(f"{work}/times-{key}.txt")]
    rec = json.load(open(f"{work}/recall-{key}.json"))
    med = {}
    for tool in ("contrai", "datasketch", "rensa"):
        r = [x for x in rows if x[0] == tool]
        wall = statistics.median(float(x[1]) for x in r)
        cpu = statistics.median(float(x[2]) + float(x[3]) for x in r)
        rss = statistics.median(int(x[4]) for x in r) / 1024
        inner = [float(x[5]) for x in r if x[5] != "-"]
        med[tool] = (len(r), wall, cpu, rss, statistics.median(inner) if inner else None)
    for tool, (n, wall, cpu, rss, inner) in med.items():
        t = rec["tools"][tool]
        ratio = med["datasketch"][1] / wall
        print(f"| {label} | {docs:,} | {tool} | {n} | {wall:.2f} | {docs / wall:,.0f} | "
              f"{docs / inner:,.0f} | {cpu:.2f} | {rss:,.0f} | "
              f"{t['0.80']['recall']:.4f} ({t['0.80']['found']}/{t['0.80']['pairs']}) | "
              f"{t['0.85']['recall']:.4f} ({t['0.85']['found']}/{t['0.85']['pairs']}) | {t['clusters']:,} | {ratio:.1f}× |"
              if inner else
              f"| {label} | {docs:,} | {tool} | {n} | {wall:.2f} | {docs / wall:,.0f} | "
              f"— | {cpu:.2f} | {rss:,.0f} | "
              f"{t['0.80']['recall']:.4f} ({t['0.80']['found']}/{t['0.80']['pairs']}) | "
              f"{t['0.85']['recall']:.4f} ({t['0.85']['found']}/{t['0.85']['pairs']}) | {t['clusters']:,} | {ratio:.1f}× |")
print()
for key, label, path, runs in sets:
    g = json.load(open(f"{work}/recall-{key}.json"))["ground_truth"]
    print(f"- {label}: ground truth {g['distinct']:,} distinct texts, {g['compared']:,} pairs compared exactly "
          f"after prefix filtering ({g['seconds']:.0f} s in Python).")
EOF
