#!/usr/bin/env bash
# Runs a command with no Rust toolchain reachable, as on a machine that never had one: every
# PATH entry holding cargo or rustc left out, CARGO_HOME and RUSTUP_HOME unset.
#
#   scripts/release/no-rust.sh COMMAND [ARGS...]
set -euo pipefail
kept=""
IFS=: read -ra dirs <<< "$PATH"
for d in "${dirs[@]}"; do
  [ -n "$d" ] && [ ! -e "$d/cargo" ] && [ ! -e "$d/rustc" ] && kept="$kept${kept:+:}$d"
done
export PATH="$kept"
unset CARGO_HOME RUSTUP_HOME
if command -v cargo >/dev/null 2>&1 || command -v rustc >/dev/null 2>&1; then
  echo "$0: a Rust toolchain is still reachable ($(command -v cargo rustc | tr '\n' ' '))" >&2
  exit 1
fi
exec "$@"
