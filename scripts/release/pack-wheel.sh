#!/usr/bin/env bash
# One wheel of contrai-ml that carries the `contrai` command: BIN (stripped) goes into the
# package's wheel-data folder (crates/contrai-py/contrai._core.data/scripts/, which pip installs
# onto PATH), maturin builds the extension and the wheel into OUT, and the folder is removed
# again — a later `pip install ./crates/contrai-py` must not ship a stale binary.
#
#   scripts/release/pack-wheel.sh BIN OUT [maturin build arguments...]
#
# MATURIN names the maturin to run (default: the one on PATH). Used by build.sh and by .ci/run.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BIN OUT [maturin build arguments...]" >&2; exit 2; }
bin="$1" out="$2"; shift 2
[ -x "$bin" ] || { echo "$0: $bin is no executable" >&2; exit 1; }
root="$(cd "$(dirname "$0")/../.." && pwd)"
data="$root/crates/contrai-py/contrai._core.data"
[ ! -e "$data" ] || { echo "$0: $data exists (a build still running, or one that died): remove it first" >&2; exit 1; }
trap 'rm -rf "$data"' EXIT
mkdir -p "$data/scripts" "$out"
install -m 755 "$bin" "$data/scripts/contrai"
"${MATURIN:-maturin}" build --manifest-path "$root/crates/contrai-py/Cargo.toml" --out "$out" "$@"
