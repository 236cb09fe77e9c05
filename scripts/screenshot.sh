#!/usr/bin/env bash
# Renders an HTML report in headless Chromium (Debian's `chromium`) and saves a PNG.
# Usage: scripts/screenshot.sh REPORT.html OUT.png [WIDTH] [HEIGHT]
# Install once with: apt-get install -y chromium
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTH] [HEIGHT]" >&2
  exit 2
fi
html=$(realpath "$1")
out=$(realpath -m "$2")
width=${3:-900}
height=${4:-2400}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "chromium is not installed: apt-get install -y chromium" >&2
  exit 1
fi
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="${width},${height}" --screenshot="$out" "file://$html" >/dev/null 2>&1
test -s "$out" && echo "wrote $out"
