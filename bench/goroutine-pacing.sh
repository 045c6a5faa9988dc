#!/usr/bin/env bash
# Goroutine profiles paced by their cost, for docs/benchmarks.md: a target leaking goroutines
# (testdata/go/cmd/goroutineleak, 3,000 of them within 10 s and more after) recorded over HTTP
# with --profiles heap,goroutine at the default intervals. Prints, per kind of capture, how
# many were taken, their mean time to answer and size (from the manifest), the goroutine
# count at the end, what the goroutine captures would have cost at a fixed --goroutine-interval,
# and the profile writer's share of the target's allocation (`heapwatch growth --json`).
#
# Settings (environment): DURATION=40s, RATE=300 (goroutines leaked per second),
# HEAPWATCH=PATH (default: target/debug/heapwatch, built if missing).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-40s}
RATE=${RATE:-300}
HW=${HEAPWATCH:-$ROOT/target/debug/heapwatch}
[ -x "$HW" ] || (cd "$ROOT" && cargo build --quiet)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
(cd "$ROOT/testdata/go" && CGO_ENABLED=0 go build -trimpath -o "$WORK/bin/" ./cmd/goroutineleak)

"$WORK/bin/goroutineleak" -rate "$RATE" >"$WORK/target.out" 2>&1 &
target=$!
until grep -q "listening on" "$WORK/target.out" 2>/dev/null; do sleep 0.05; done
addr=$(sed -n 's/^listening on //p' "$WORK/target.out")
"$HW" collect "http://$addr" --out "$WORK/run" --duration "$DURATION" \
    --profiles heap,goroutine --quiet
kill "$target"; wait "$target" 2>/dev/null || true

python3 - "$WORK/run/manifest.jsonl" "$DURATION" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
duration = float(sys.argv[2].rstrip("s"))
for kind in ("heap", "goroutine"):
    ok = [r for r in records if r["kind"] == kind and r["error"] is None]
    lat = sum(r["latency_ms"] for r in ok) / max(len(ok), 1)
    size = sum(r["bytes"] for r in ok) / max(len(ok), 1)
    print("%-9s %4d captures, mean %7.1f ms to answer, mean %8.1f KiB" % (kind, len(ok), lat, size / 1024))
g = [r for r in records if r["kind"] == "goroutine" and r["error"] is None]
h = [r for r in records if r["kind"] == "heap" and r["error"] is None]
if g:
    print("goroutines at the end: %d" % g[-1]["totals"].get("goroutine", 0))
    glat = sum(r["latency_ms"] for r in g) / len(g)
    hlat = sum(r["latency_ms"] for r in h) / len(h)
    print("time answering goroutine profiles: %.0f ms (at a fixed 1s interval: %.0f ms); heap profiles: %.0f ms"
          % (glat * len(g), glat * duration, hlat * len(h)))
PY
"$HW" growth "$WORK/run" --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["cycles"][0]
p = c.get("profiling") or {}
print("profile writer: %.1f KiB/s, %.1f %% of all allocation" % (
    p.get("alloc_bytes_per_sec", 0) / 1024, 100 * p.get("alloc_share", 0)))'
