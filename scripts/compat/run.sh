#!/usr/bin/env bash
# The package's tests with the oldest and with the newest transformers, Lightning, Accelerate and
# PEFT that crates/contrai-py/pyproject.toml declares (scripts/compat/pins.py reads the ranges).
#
#   scripts/compat/run.sh [oldest] [newest] [-- PYTEST_ARGS...]
#
# Default: both, the whole suite (-q -p no:cacheprovider crates/contrai-py/tests).
#
# Each gets a venv outside the repository, ~/.cache/contrai-compat-<which>, with the frameworks
# installed from PyPI. torch is not installed again: the main venv's torch and everything it
# requires are linked in by a .pth file (share_torch.py), so both venvs test with the main venv's
# torch build. The package is built into each (pip install ./crates/contrai-py; the Rust build
# goes to $CARGO_TARGET_DIR, default /work/target-py) and its tests run there; each summary
# (versions, pytest's counts, seconds) is printed at the end and kept in <venv>/summary.txt.
#
# Environment: CONTRAI_MAIN_VENV (default ~/.cache/contrai-ci-venv: the Python and torch to use),
# CONTRAI_COMPAT_ROOT (default ~/.cache).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/scripts/compat"
MAIN=${CONTRAI_MAIN_VENV:-$HOME/.cache/contrai-ci-venv}
CACHE=${CONTRAI_COMPAT_ROOT:-$HOME/.cache}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target-py}
PYPROJECT="$ROOT/crates/contrai-py/pyproject.toml"
WHICH=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do WHICH+=("$1"); shift; done
[ $# -gt 0 ] && shift
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(-q -p no:cacheprovider crates/contrai-py/tests)
[ ${#WHICH[@]} -gt 0 ] || WHICH=(oldest newest)

# A venv with the main venv's Python; torch's closure linked in.
make_venv() {
    local venv=$1
    if [ ! -x "$venv/bin/python" ]; then
        "$MAIN/bin/python" -m venv "$venv"
    fi
    "$MAIN/bin/python" "$HERE/share_torch.py" "$CACHE/contrai-compat-torch"
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$CACHE/contrai-compat-torch" > "$site/contrai-shared-torch.pth"
    # torchrun for the DDP tests, on this venv's Python (the main venv's would import its own packages).
    printf '#!%s\nfrom torch.distributed.run import main\nmain()\n' "$venv/bin/python" > "$venv/bin/torchrun"
    chmod +x "$venv/bin/torchrun"
}

run_one() {
    local which=$1 venv="$CACHE/contrai-compat-$1"
    local -a reqs
    mapfile -t reqs < <("$MAIN/bin/python" "$HERE/pins.py" "$which" "$PYPROJECT")
    echo "== $which: ${reqs[*]} (venv $venv)"
    make_venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade "${reqs[@]}" pytest
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$ROOT/crates/contrai-py"
    local versions start rc=0 out
    versions=$("$venv/bin/python" -c '
import importlib.metadata as m
print(" ".join(f"{p}=={m.version(p)}" for p in ("torch", "transformers", "lightning", "accelerate", "peft", "contrai-ml")))')
    echo "== $which: $versions"
    start=$(date +%s)
    out="$venv/pytest.log"
    (cd "$ROOT" && PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest "${TESTS[@]}") 2>&1 | tee "$out" || rc=$?
    printf '%s: %s | %s | %ss\n' "$which" "$versions" "$(grep -E '(passed|failed|error)' "$out" | tail -1)" \
        "$(( $(date +%s) - start ))" > "$venv/summary.txt"
    return $rc
}

status=0
for which in "${WHICH[@]}"; do run_one "$which" || status=1; done
for which in "${WHICH[@]}"; do cat "$CACHE/contrai-compat-$which/summary.txt"; done
exit $status
