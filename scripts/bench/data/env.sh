# Settings shared by bench.sh and diag.sh (sourced; every value can be overridden from the
# environment).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE="$ROOT/scripts/bench/data"
PY="${PY:-$HOME/.cache/contrai-anchors-lite/bin/python}"
WORK="${WORK:-${TMPDIR:-/tmp}/contrai-bench-data}"
SA="${SA:-$ROOT/../shared/data/spamassassin.jsonl}"
BASE="${BASE:-86500}"
CLEAN=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
