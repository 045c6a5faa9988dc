#!/usr/bin/env bash
# Renders the report of the demo recording (2.1.0 against 2.0.2) and photographs it with
# headless Chromium into flamegraphs/report.png, and its explorer (boot cycle 2, a span dragged
# across its timeline from 2 s to 7 s with the mouse) into flamegraphs/explorer.png: the two
# pictures the README shows. Re-run it after a change to the report's look. Needs cargo,
# python3 and chromium (apt-get install chromium).
#
#   demo/screenshot.sh [OUTPUT.png [EXPLORER.png]]     (HEAPWATCH=PATH: that binary, no release build)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
png=${1:-$repo/flamegraphs/report.png}
explorer_png=${2:-$repo/flamegraphs/explorer.png}
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n $browser ]] || { echo "screenshot: chromium not found (apt-get install chromium)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-shot.XXXXXX")
trap 'rm -rf "$work"' EXIT

hw=${HEAPWATCH:-}
if [[ -z $hw ]]; then
	(cd "$repo" && cargo build --release --quiet)
	hw=$(cd "$repo" && cargo metadata --format-version 1 --no-deps |
		sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/heapwatch
fi
"$hw" report "$repo/demo/recording/2.1.0" --baseline "$repo/demo/recording/2.0.2" \
	-o "$work/report" --fail-on 'growth>5MiB/s' --fail-on 'regression>1.5x' >/dev/null 2>&1 || true

mkdir -p "$(dirname "$png")"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync \
	--hide-scrollbars --user-data-dir="$work/profile" --window-size=1200,1900 \
	--screenshot="$png" "file://$work/report/index.html" 2>/dev/null
echo "screenshot: $png ($(du -h "$png" | cut -f1))"
# The explorer, driven over the DevTools pipe: a real drag across the chart, then the picture.
python3 "$repo/bench/chromium_cdp.py" shot "file://$work/report/index.html" "$explorer_png" \
	--select 2 2 7 --element '#explore-2'
echo "screenshot: $explorer_png ($(du -h "$explorer_png" | cut -f1))"
