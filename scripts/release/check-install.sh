#!/usr/bin/env bash
# A wheel as a user meets it: installed by pip into a fresh venv on a machine with no Rust
# toolchain reachable (no-rust.sh), then the `contrai` command it carries (--version, a doctor
# answer on a labelled run, watch --help), `import contrai`, `python -m contrai`, and the
# package's tests against the installed wheel with nothing but pytest beside it: every test that
# needs torch, Ray, llama.cpp or another optional package skips, saying which.
#
#   scripts/release/check-install.sh WHEEL
#
# Prints the seconds from `pip install` to the doctor's first answer. Needs ../shared (a labelled
# run of eval/doctor-real); PYTHON names the interpreter to make the venv with (default python3).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 WHEEL" >&2; exit 2; }
wheel="$(realpath "$1")"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
case_dir="$root/../shared/eval/doctor-real/cases/hf-codebert-clinical-overfit"
[ -d "$case_dir" ] || { echo "$0: $case_dir is missing (../shared beside the repository)" >&2; exit 1; }
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
venv="$work/venv"
"${PYTHON:-python3}" -m venv "$venv"
in_venv() { PATH="$venv/bin:$PATH" "$here/no-rust.sh" "$@"; }

start=$(date +%s.%N)
in_venv pip install -q --disable-pip-version-check "$wheel"
# Exit 1: the doctor found something that needs attention, as it must here.
status=0
in_venv contrai doctor "$case_dir" --json > "$work/doctor.json" || status=$?
end=$(date +%s.%N)
[ "$status" -le 1 ] || { echo "$0: contrai doctor exited $status" >&2; exit 1; }
echo "pip install to the first doctor answer: $(python3 -c "print(round($end - $start, 1))") s"
in_venv python - "$work/doctor.json" <<'PY'
import json, sys
labels = {f["label"] for run in json.load(open(sys.argv[1]))["runs"] for f in run["findings"]}
assert "overfitting" in labels, f"the labelled run is overfitting; the doctor said {sorted(labels)}"
PY

in_venv contrai --version | grep -Eq "^contrai $version \([0-9a-f]{12}(-dirty)?\)$" \
  || { echo "$0: contrai --version said '$(in_venv contrai --version)', not 'contrai $version (<commit>)'" >&2; exit 1; }
in_venv contrai watch --help | grep -q "Usage: contrai watch"
in_venv python -c "import contrai, sys; sys.exit(contrai.__version__ != '$version')"
[ "$(in_venv python -m contrai --version)" = "$(in_venv contrai --version)" ]
echo "contrai $version: the command, the import and python -m contrai answer (no Rust reachable)"

in_venv pip install -q --disable-pip-version-check pytest
(cd "$work" && in_venv python -m pytest -q -p no:cacheprovider -rs "$root/crates/contrai-py/tests")
