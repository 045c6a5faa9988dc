#!/usr/bin/env bash
# Renders the report of the demo recording (2.1.0 against 2.0.2) and photographs it with
# headless Chromium into flamegraphs/report.png, the picture the README shows. Re-run it after
# a change to the report's look. Needs cargo and chromium (apt-get install chromium).
#
#   demo/screenshot.sh [OUTPUT.png]
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
png=${1:-$repo/flamegraphs/report.png}
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n $browser ]] || { echo "screenshot: chromium not found (apt-get install chromium)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-shot.XXXXXX")
trap 'rm -rf "$work"' EXIT

(cd "$repo" && cargo build --release --quiet)
hw=$(cd "$repo" && cargo metadata --format-version 1 --no-deps |
	sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/heapwatch
"$hw" report "$repo/demo/recording/2.1.0" --baseline "$repo/demo/recording/2.0.2" \
	-o "$work/report" --fail-on 'growth>5MiB/s' --fail-on 'regression>1.5x' >/dev/null 2>&1 || true

mkdir -p "$(dirname "$png")"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync \
	--hide-scrollbars --user-data-dir="$work/profile" --window-size=1200,1900 \
	--screenshot="$png" "file://$work/report/index.html" 2>/dev/null
echo "screenshot: $png ($(du -h "$png" | cut -f1))"
