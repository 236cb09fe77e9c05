#!/usr/bin/env bash
# Contrai's release, into dist/: the wheel of contrai-ml that carries the `contrai` command
# (manylinux_2_17 x86-64: any CPython >= 3.10 on glibc >= 2.17), the sdist (the Python module built
# from source where no wheel fits), contrai-<version>-x86_64-linux.tar.gz (the stripped command,
# README, CHANGELOG, licences), and SHA256SUMS over them. With the Rust standard library for
# aarch64 installed (rustup target add aarch64-unknown-linux-gnu), the aarch64 wheel and archive
# as well.
#
#   scripts/release/build.sh
#
# Everything it downloads comes from PyPI (maturin, zig, cargo-zigbuild, auditwheel, into
# CONTRAI_RELEASE_VENV, default ~/.cache/contrai-release-venv) and crates.io. zig links against
# glibc 2.17's symbols, so the binaries run on older systems than the one building them; auditwheel
# checks every ELF file in the wheel, the command included, against the tag. From an empty target/
# on two cores: 15 minutes for x86-64, 16 more for aarch64 (BENCHMARKS.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
grep -q "^## \[$version\]" CHANGELOG.md \
  || { echo "$0: CHANGELOG.md has no section '## [$version]' for the version Cargo.toml sets" >&2; exit 1; }
if [ -n "$(git status --porcelain --untracked-files=no)" ] && [ "${CONTRAI_ALLOW_DIRTY:-}" != 1 ]; then
  echo "$0: tracked files differ from the commit; commit first (CONTRAI_ALLOW_DIRTY=1 builds anyway, stamped -dirty)" >&2
  exit 1
fi

tools="${CONTRAI_RELEASE_VENV:-$HOME/.cache/contrai-release-venv}"
[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
"$tools/bin/pip" install -q --disable-pip-version-check \
  "maturin==1.16.0" "ziglang==0.17.1" "cargo-zigbuild==0.24.1" "auditwheel==6.8.2"
# cargo-zigbuild and maturin --zig find zig through `python -m ziglang` on PATH.
export PATH="$tools/bin:$PATH" MATURIN="$tools/bin/maturin"

dist="$root/dist"
rm -rf "$dist" && mkdir -p "$dist"
arches=(x86_64)
if rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
  arches+=(aarch64)
else
  echo "aarch64: skipped — the Rust standard library for aarch64-unknown-linux-gnu is not installed"
fi

for arch in "${arches[@]}"; do
  target="$arch-unknown-linux-gnu"
  # A target folder an architecture: the build scripts and proc-macros, built for this machine
  # with that architecture's zig settings, would otherwise be built again at every switch.
  export CARGO_TARGET_DIR="$root/target/dist-$arch"
  # The command: glibc 2.17's symbols, no debug info, stripped ([profile.dist]).
  cargo zigbuild --locked --profile dist -p contrai-cli --target "$target.2.17"
  bin="$CARGO_TARGET_DIR/$target/dist/contrai"
  # The wheel: the extension built the same way, the command in its scripts.
  "$root/scripts/release/pack-wheel.sh" "$bin" "$dist" --locked --profile dist --zig \
    --compatibility manylinux2014 --target "$target"
  wheel="$(ls "$dist"/contrai_ml-"$version"-*"$arch".whl)"
  auditwheel show "$wheel" | tee "target/auditwheel-$arch.txt"
  grep -q "manylinux_2_17_$arch" "target/auditwheel-$arch.txt" \
    || { echo "$0: $wheel is not manylinux_2_17_$arch (see auditwheel's words above)" >&2; exit 1; }
  # The archive: reproducible (sorted names, no owners, the commit's time).
  name="contrai-$version-$arch-linux"
  stage="$(mktemp -d)/$name"
  mkdir -p "$stage"
  install -m 755 "$bin" "$stage/contrai"
  install -m 644 README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE "$stage/"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$(git log -1 --format=%ct)" \
    -C "$(dirname "$stage")" -cf - "$name" | gzip -n -9 > "$dist/$name.tar.gz"
  rm -rf "$(dirname "$stage")"
done

"$MATURIN" sdist --manifest-path crates/contrai-py/Cargo.toml --out "$dist"
(cd "$dist" && sha256sum -- *.whl *.tar.gz > SHA256SUMS && sha256sum --quiet -c SHA256SUMS)
ls -l "$dist"
