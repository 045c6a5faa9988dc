#!/usr/bin/env bash
# The profiler's own cost on an idle target, for docs/benchmarks.md: the share of the target's
# allocation made by the profile writer (`heapwatch growth --json` → cycles[0].profiling), with
# the idle back-off off (--idle-backoff 1) and on (the default, 4), at the default interval.
# Targets: an idle net/http/pprof service (testdata/go/cmd/steady -rate 0), the same serving a
# trickle of requests (-rate 256KiB), and an idle OpenZiti-style agent (testdata/go/cmd/agentgrow
# -rate 0 -peers 0, through agent:auto).
#
# Settings (environment): DURATION=60s, HEAPWATCH=PATH (default: target/debug/heapwatch,
# built if missing; the collector's own speed does not enter the figure).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${DURATION:-60s}
HW=${HEAPWATCH:-$ROOT/target/debug/heapwatch}
[ -x "$HW" ] || (cd "$ROOT" && cargo build --quiet)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
(cd "$ROOT/testdata/go" && CGO_ENABLED=0 go build -trimpath -o "$WORK/bin/" ./cmd/steady ./cmd/agentgrow)

share() {
    "$HW" growth "$1" --json | python3 -c '
import json, sys
c = json.load(sys.stdin)["cycles"][0]
p = c.get("profiling") or {}
print("%5d captures  profile writer %6.1f KiB/s  %5.1f %% of all allocation" % (
    c["captures"], p.get("alloc_bytes_per_sec", 0) / 1024, 100 * p.get("alloc_share", 0)))'
}

for backoff in 1 4; do
    # HTTP: a service with a 16 MiB working set and no requests (idle), then one serving a
    # trickle of requests (256 KiB/s of short-lived buffers: quiet, not idle).
    for rate in 0 256KiB; do
        rm -f "$WORK/steady.out"
        "$WORK/bin/steady" -rate "$rate" -working-set 16MiB >"$WORK/steady.out" 2>&1 &
        target=$!
        until grep -q "listening on" "$WORK/steady.out" 2>/dev/null; do sleep 0.05; done
        addr=$(sed -n 's/^listening on //p' "$WORK/steady.out")
        "$HW" collect "http://$addr" --out "$WORK/http-$rate-$backoff" --duration "$DURATION" \
            --idle-backoff "$backoff" --quiet
        kill "$target"; wait "$target" 2>/dev/null || true
        printf 'http -rate %-6s --idle-backoff %s: %s\n' "$rate" "$backoff" \
            "$(share "$WORK/http-$rate-$backoff")"
    done

    # Agent: an idle agent with no growth and no goroutine leak.
    mkdir -p "$WORK/agents-$backoff"
    rm -f "$WORK/agent.out"
    TMPDIR="$WORK/agents-$backoff" "$WORK/bin/agentgrow" -app-id idle -rate 0 -peers 0 \
        >"$WORK/agent.out" 2>&1 &
    target=$!
    until grep -q "agent on" "$WORK/agent.out" 2>/dev/null; do sleep 0.05; done
    "$HW" collect agent:auto:idle --agent-dir "$WORK/agents-$backoff" --out "$WORK/agent-$backoff" \
        --duration "$DURATION" --idle-backoff "$backoff" --quiet
    kill "$target"; wait "$target" 2>/dev/null || true
    printf 'agent -rate 0      --idle-backoff %s: %s\n' "$backoff" "$(share "$WORK/agent-$backoff")"
done
