#!/usr/bin/env bash
# Read-and-diagnose throughput: `contrai doctor --json` (release) vs TensorBoard's
# event_accumulator.EventAccumulator (size_guidance 0 for scalars, Reload(), all scalar tags),
# on the same event files, alternating runs, medians. Usage: scripts/bench/doctor/bench.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS="${1:-5}"
PY="${CONTRAI_BENCH_PY:-$HOME/.cache/contrai-anchors-lite/bin/python}"
EVAL="${CONTRAI_EVAL:-../shared/eval/doctor/cases}"
WORK="${CONTRAI_BENCH_DIR:-target/bench-doctor}"
"$PY" -c 'import tensorboard' || { echo "need tensorboard in $PY" >&2; exit 1; }
cargo build --release -q -p contrai-cli
cargo build --release -q -p contrai-doctor --example replay
BIN="$PWD/target/release/contrai"
REPLAY="$PWD/target/release/examples/replay"
mkdir -p "$WORK/large"
if ! ls "$WORK"/large/events.out.tfevents.* >/dev/null 2>&1; then
  "$PY" scripts/bench/doctor/gen_events.py "$WORK/large" 50000
fi
FILES=()
while IFS= read -r f; do FILES+=("$f"); done < <(find "$EVAL" -name 'events.out.tfevents.*' 2>/dev/null | sort)
FILES+=("$(ls "$WORK"/large/events.out.tfevents.* | head -1)")
echo "# $(date -u +%FT%TZ) $(uname -m), $(nproc) cores, tensorboard $("$PY" -c 'import tensorboard; print(tensorboard.__version__)'), runs=$RUNS"
"$PY" scripts/bench/doctor/bench.py "$BIN" "$REPLAY" "$RUNS" "${FILES[@]}"
