#!/usr/bin/env bash
# The proc source against a live Go target (testdata/go/cmd/bigprofile -listen, STACKS stacks
# at MemProfileRate=1, churning CHURN/s so the GC runs and the profile keeps changing):
#   source-alone  examples/proc_capture: N captures back to back (captures/s, wall and CPU per
#                 capture, profile size, attach cold and from the build-id cache, peak RSS)
#   collect-1ms   heapwatch collect proc:PID --interval 1ms for DURATION s (the whole pipeline:
#                 capture, decode, dedup, durable store): captures/s, CPU and peak RSS
#   collect-100ms the same at --interval 100ms for RATE_WINDOW s: the CPU of ten captures a second
#   target-cpu    the target's CPU over CPU_WINDOW s alone, then with collect proc:PID at 1ms
# for docs/benchmarks.md. Needs cargo, go and GNU time (/usr/bin/time).
# Settings: STACKS=100000 CHURN=8MiB N=200 DURATION=10 CPU_WINDOW=10 RATE_WINDOW=10 BENCH_DIR=$TMPDIR
# (and CARGO_TARGET_DIR, where this tree's release build is)
# BASE=DIR (optional): a directory holding another build's heapwatch, and its proc_capture if
# source-alone is to run for it (e.g. main's release build copied there); the collects then run
# for it too, on the same target in the same run, labelled "base", before this tree's ("this").
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STACKS=${STACKS:-100000}
CHURN=${CHURN:-8MiB}
N=${N:-200}
DURATION=${DURATION:-10}
CPU_WINDOW=${CPU_WINDOW:-10}
RATE_WINDOW=${RATE_WINDOW:-10}
TICK=$(getconf CLK_TCK)
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time (apt-get install -y time)" >&2; exit 2; }

WORK=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/heapwatch-proc-bench.XXXXXX")
TARGET_PID=
cleanup() {
    if [ -n "$TARGET_PID" ]; then
        kill "$TARGET_PID" 2>/dev/null || true
        wait "$TARGET_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building release heapwatch and examples/proc_capture ..." >&2
(cd "$ROOT" && cargo build --release --quiet --bin heapwatch --example proc_capture)
# Cargo builds into CARGO_TARGET_DIR when it is set, and so the script looks there.
RELEASE="${CARGO_TARGET_DIR:-$ROOT/target}/release"
HW="$RELEASE/heapwatch"
echo "building the Go target ..." >&2
(cd "$ROOT/testdata/go" && go build -o "$WORK/bigprofile" ./cmd/bigprofile)

"$WORK/bigprofile" -listen 127.0.0.1:0 -stacks "$STACKS" -churn "$CHURN" > "$WORK/target.out" 2>&1 &
TARGET_PID=$!
for _ in $(seq 600); do grep -q '^listening on' "$WORK/target.out" && break; sleep 0.1; done
grep -q '^listening on' "$WORK/target.out" || { echo "the target did not start" >&2; exit 1; }

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

BUILDS="this=$RELEASE"
if [ -n "${BASE:-}" ]; then
    [ -x "$BASE/heapwatch" ] || { echo "BASE=$BASE needs heapwatch in it" >&2; exit 2; }
    BUILDS="base=$BASE this=$RELEASE"
fi
for build in $BUILDS; do
    name=${build%%=*} dir=${build#*=}
    probe="$dir/proc_capture"; [ -x "$probe" ] || probe="$dir/examples/proc_capture"
    echo "== source-alone [$name] ($N captures; target $STACKS stacks, churn $CHURN/s)"
    if [ -x "$probe" ]; then "$probe" "$TARGET_PID" "$N"; else echo "(no proc_capture in $dir)"; fi

    echo "== collect-1ms [$name] (${DURATION}s)"
    rm -rf "$WORK/run"
    /usr/bin/time -f '{"collector_cpu_s":%U+%S,"collector_peak_rss_kib":%M}' \
        "$dir/heapwatch" collect "proc:$TARGET_PID" --out "$WORK/run" --interval 1ms \
        --duration "${DURATION}s" --memstats-interval 0 2>&1 | tail -2

    # The goal's pace: ten captures a second, for RATE_WINDOW seconds.
    echo "== collect-100ms [$name] (${RATE_WINDOW}s)"
    rm -rf "$WORK/run"
    /usr/bin/time -f '{"collector_cpu_s":%U+%S,"collector_peak_rss_kib":%M}' \
        "$dir/heapwatch" collect "proc:$TARGET_PID" --out "$WORK/run" --interval 100ms \
        --duration "${RATE_WINDOW}s" --memstats-interval 0 2>&1 | tail -2
done

echo "== target-cpu (${CPU_WINDOW}s windows)"
before=$(cpu_ticks "$TARGET_PID"); sleep "$CPU_WINDOW"; alone=$(( $(cpu_ticks "$TARGET_PID") - before ))
rm -rf "$WORK/run2"
before=$(cpu_ticks "$TARGET_PID")
"$HW" collect "proc:$TARGET_PID" --out "$WORK/run2" --interval 1ms --duration "${CPU_WINDOW}s" \
    --memstats-interval 0 -q
with=$(( $(cpu_ticks "$TARGET_PID") - before ))
echo "{\"target_cpu_s_alone\":$(echo "scale=2; $alone / $TICK" | bc),\"target_cpu_s_with_proc_collect\":$(echo "scale=2; $with / $TICK" | bc)}"
