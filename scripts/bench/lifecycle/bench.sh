#!/usr/bin/env bash
# The lifecycle against a plain run of the same total step budget, on the built-in default and on
# ../shared/data/spamassassin.jsonl: holdout accuracy after main and after contract + refine,
# steps trained, and the steps saved when the controller ends main early. The plain run is one
# cosine main phase of main + contract + refine's planned steps with the controller off, the same
# warmup steps and (dropout masks and batch order are keyed by the training step) the same random
# draws: a paired comparison in which the two runs are identical until main's decay sets them apart.
#
#   bash scripts/bench/lifecycle/bench.sh          # SEEDS="42" by default; OUT=/tmp/contrai-lifecycle
#   DATASETS=spamassassin SEEDS="3 5" bash scripts/bench/lifecycle/bench.sh   # one data set
#   EXTRA=$'[contract]\nbatch = 32' PLAIN=0 bash scripts/bench/lifecycle/bench.sh  # a variant, lifecycle only
#
# "After main" evaluates the lifecycle's main-end checkpoint on the holdout with the bench-only
# example `holdout_at` (the run itself reads its holdout once, at the very end).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
OUT="${OUT:-/tmp/contrai-lifecycle}"
SEEDS="${SEEDS:-42}"
SPAM="$ROOT/../shared/data/spamassassin.jsonl"
(cd "$ROOT" && cargo build --release -q -p contrai-cli && cargo build --release -q --example holdout_at -p contrai-train)
rm -rf "$OUT"; mkdir -p "$OUT/bin"
# Private copies: a rebuild during the benchmark must not change the binary under it.
cp "$ROOT/target/release/contrai" "$ROOT/target/release/examples/holdout_at" "$OUT/bin/"
BIN="$OUT/bin/contrai"
AT="$OUT/bin/holdout_at"
echo "contrai $(git -C "$ROOT" rev-parse --short HEAD); $(nproc) cores"
datasets=()
for ds in ${DATASETS:-default spamassassin}; do
  if [[ $ds == spamassassin && ! -f "$SPAM" ]]; then echo "skipping spamassassin: $SPAM is absent"; continue; fi
  datasets+=("$ds")
done

planned() { python3 -c "import json;p=json.load(open('$1/plan.json'));print(p['total_steps'])"; }
field() { python3 -c "import json,sys;v=json.load(open('$1'));print(eval('v'+sys.argv[1]))" "$2"; }

printf '\n| data | seed | run | main ended | steps trained | holdout after main | final holdout | wall s |\n|---|---:|---|---|---:|---:|---:|---:|\n' > "$OUT/table.md"
for ds in "${datasets[@]}"; do
  data_line=""; [[ $ds == spamassassin ]] && data_line="path = \"$SPAM\""
  for seed in $SEEDS; do
    d="$OUT/$ds-$seed"; mkdir -p "$d"
    printf '[run]\nname = "lifecycle"\nseed = %s\nkeep_last = 1000\n[data]\n%s\n%s\n' "$seed" "$data_line" "${EXTRA:-}" > "$d/lifecycle.toml"
    t0=$(date +%s.%N); "$BIN" train "$d/lifecycle.toml" --out "$d" > "$d/lifecycle.log" 2>&1; t1=$(date +%s.%N)
    run="$d/lifecycle"; budget=$(planned "$run")
    end=$(field "$run/final/eval.json" "['main_end'][0]"); why=$(field "$run/final/eval.json" "['main_end'][1]")
    after_main=$("$AT" "$run" "$end" | python3 -c "import json,sys;print(json.load(sys.stdin)['holdout_accuracy'])")
    final=$(field "$run/final/eval.json" "['holdout_accuracy']")
    trained=$(grep -c '"train_loss"' "$run/metrics.jsonl")
    printf '| %s | %s | lifecycle | %s at %s | %s (of %s planned) | %.2f %% | %.2f %% | %.0f |\n' "$ds" "$seed" "$why" "$end" "$trained" "$budget" \
      "$(echo "$after_main*100" | bc -l)" "$(echo "$final*100" | bc -l)" "$(echo "$t1-$t0" | bc -l)" >> "$OUT/table.md"
    if [[ ${PLAIN:-1} == 0 ]]; then cat "$OUT/table.md"; continue; fi
    # Warmed up over the lifecycle main's 12 steps (3 % of 400): the two differ only after them.
    warmup=$(python3 -c "print(round(400 * 0.03) / $budget)")
    printf '[run]\nname = "plain"\nseed = %s\nphases = ["main"]\n[main]\nsteps = %s\nwarmup = %s\n[guards]\nenabled = false\n[data]\n%s\n' "$seed" "$budget" "$warmup" "$data_line" > "$d/plain.toml"
    t0=$(date +%s.%N); "$BIN" train "$d/plain.toml" --out "$d" > "$d/plain.log" 2>&1; t1=$(date +%s.%N)
    final=$(field "$d/plain/final/eval.json" "['holdout_accuracy']")
    printf '| %s | %s | plain (no controller) | — | %s | — | %.2f %% | %.0f |\n' "$ds" "$seed" "$budget" "$(echo "$final*100" | bc -l)" "$(echo "$t1-$t0" | bc -l)" >> "$OUT/table.md"
    cat "$OUT/table.md"
  done
done
echo; echo "decisions of each lifecycle run: $OUT/*/lifecycle/decisions.jsonl"
