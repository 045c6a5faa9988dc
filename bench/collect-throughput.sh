#!/usr/bin/env bash
# Collector benchmark: sustained heap captures against a live Go target that serves a ~1 MB
# (gzipped) heap profile, for docs/benchmarks.md. Builds the release heapwatch and the Go
# target (testdata/go/cmd/bigprofile -listen), then, REPEATS times over:
#   live-1ms      collect --interval 1ms for DURATION: captures/s, durable_ms, RSS
#   live-500ms    collect at the default interval for DURATION: RSS
#   target-alone  the target's CPU over CPU_WINDOW with nobody asking
#   cpu-500ms     the target's CPU over CPU_WINDOW with the collector at 500ms
#   cpu-100ms     the same at 100ms (the burst interval)
#   static-1ms    collect --interval 1ms against a target that costs nothing to ask (a few
#                 profiles captured from the live one, served in turn): the collector alone
# and prints a table of medians and ranges. Captures go under BENCH_DIR (its filesystem sets
# the fsync cost). Needs cargo, go, python3 and GNU time (/usr/bin/time; apt-get install time).
#
# Settings (environment): REPEATS=3 DURATION=20 CPU_WINDOW=30 (seconds), STACKS=100000 and
# CHURN=8MiB (the target's), BENCH_DIR=$TMPDIR, KEEP=1 (keep the run directories), STRACE=1
# (add a syscall summary of the collector at 1ms: strace -c -w -f, wall time per call),
# HEAPWATCH=PATH (measure this binary, e.g. a scratch build, instead of building this tree),
# COLLECT_ARGS="--max-duty 1" (extra collect flags: the duty cap limits the rate on purpose).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
REPEATS=${REPEATS:-3}
COLLECT_ARGS=${COLLECT_ARGS:-}
DURATION=${DURATION:-20}
CPU_WINDOW=${CPU_WINDOW:-30}
STACKS=${STACKS:-100000}
CHURN=${CHURN:-8MiB}
STATS="$ROOT/bench/collect-stats.py"
TICK=$(getconf CLK_TCK)

[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time (apt-get install -y time)" >&2; exit 2; }

WORK=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/heapwatch-collect-bench.XXXXXX")
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if [ -n "${KEEP:-}" ]; then
        echo "kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${HEAPWATCH:-}" ]; then
    HW=$(realpath "$HEAPWATCH")
else
    echo "building release heapwatch ..." >&2
    (cd "$ROOT" && cargo build --release --quiet)
    HW="$ROOT/target/release/heapwatch"
fi
echo "building the Go target ..." >&2
(cd "$ROOT/testdata/go" && go build -o "$WORK/bigprofile" ./cmd/bigprofile)

# Starts a server that prints "listening on HOST:PORT" (port 0: the kernel picks a free one)
# and sets ADDR and LAST_PID.
start_server() {
    local log=$1
    shift
    "$@" >"$log" 2>"$log.err" &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
    for _ in $(seq 600); do
        ADDR=$(sed -n 's/^listening on //p' "$log")
        [ -n "$ADDR" ] && return 0
        kill -0 "$LAST_PID" 2>/dev/null || { cat "$log.err" >&2; exit 1; }
        sleep 0.1
    done
    echo "$* did not start listening" >&2
    exit 1
}

fetch() { # URL FILE
    python3 -c 'import sys, urllib.request; open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1]).read())' "$1" "$2"
}

cpu_ticks() { # utime + stime of PID, in clock ticks
    sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}

now() { date +%s.%N; }

RESULTS="$WORK/results.jsonl"

calc() { # EXPRESSION [NAME=VALUE...]: awk arithmetic, printed with up to two decimals
    local expr=$1
    shift
    local vars=()
    for v in "$@"; do vars+=(-v "$v"); done
    awk "${vars[@]}" "BEGIN { x = $expr; if (x == int(x)) print x; else printf \"%.2f\\n\", x }"
}

# One collector run under GNU time; appends its figures to RESULTS.
# collect CASE URL INTERVAL SECONDS [TARGET_PID]
collect() {
    local case=$1 url=$2 interval=$3 seconds=$4 target=${5:-}
    local run="$WORK/$case-$rep" t0 t1 c0=0 c1=0
    if [ -n "$target" ]; then c0=$(cpu_ticks "$target"); fi
    t0=$(now)
    /usr/bin/time -v -o "$run.time" "$HW" collect "$url" --out "$run" --interval "$interval" \
        --memstats-interval 0 --duration "${seconds}s" --quiet $COLLECT_ARGS || {
        echo "heapwatch collect failed in case $case (exit $?); see $run" >&2
        KEEP=1
        exit 1
    }
    t1=$(now)
    if [ -n "$target" ]; then c1=$(cpu_ticks "$target"); fi
    local rss_kb user sys n wall
    rss_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$run.time")
    user=$(awk -F': ' '/User time/ { print $2 }' "$run.time")
    sys=$(awk -F': ' '/System time/ { print $2 }' "$run.time")
    n=$(grep -c '"kind":"heap".*"error":null' "$run/manifest.jsonl" || true)
    wall=$(calc "b - a" a="$t0" b="$t1")
    local extra=(case="$case" repeat="$rep" interval="$interval"
        rss_mib="$(calc "k / 1024" k="$rss_kb")"
        collector_cpu_s="$(calc "u + s" u="$user" s="$sys")")
    if [ "$n" -gt 0 ]; then
        extra+=(collector_cpu_ms_per_capture="$(calc "1000 * (u + s) / n" u="$user" s="$sys" n="$n")")
    fi
    if [ -n "$target" ]; then
        local pct
        pct=$(calc "100 * d / hz / w" d=$((c1 - c0)) hz="$TICK" w="$wall")
        extra+=(target_cpu_pct="$pct")
        if [ -n "${ALONE_PCT:-}" ]; then
            # What serving profiles cost the target: its CPU above its own idle churn.
            extra+=(target_extra_pct="$(calc "p - a" p="$pct" a="$ALONE_PCT")")
            if [ "$n" -gt 0 ]; then
                extra+=(target_cpu_ms_per_capture="$(calc "10 * (p - a) * w / n" p="$pct" a="$ALONE_PCT" w="$wall" n="$n")")
            fi
        fi
    fi
    python3 "$STATS" run "$run" "$seconds" "${extra[@]}" | tee -a "$RESULTS" >&2
    [ -n "${KEEP:-}" ] || rm -rf "$run"
}

echo "starting the target (bigprofile -listen, $STACKS stacks, churn $CHURN/s) ..." >&2
start_server "$WORK/target.out" "$WORK/bigprofile" -listen 127.0.0.1:0 -stacks "$STACKS" -churn "$CHURN"
TARGET_PID=$LAST_PID
LIVE="http://$ADDR"
mkdir -p "$WORK/static"
for i in 1 2 3 4; do
    fetch "$LIVE/debug/pprof/heap" "$WORK/static/heap-$i.pb.gz"
done
PROFILE_BYTES=$(stat -c %s "$WORK/static/heap-4.pb.gz")
start_server "$WORK/static.out" python3 "$ROOT/bench/collect-static-target.py" "$WORK"/static/*.pb.gz
STATIC="http://$ADDR"

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq "$REPEATS"); do
    echo "--- repeat $rep of $REPEATS" >&2
    ALONE_PCT=
    collect live-1ms "$LIVE" 1ms "$DURATION" "$TARGET_PID"
    collect live-500ms "$LIVE" 500ms "$DURATION"
    c0=$(cpu_ticks "$TARGET_PID")
    t0=$(now)
    sleep "$CPU_WINDOW"
    c1=$(cpu_ticks "$TARGET_PID")
    t1=$(now)
    ALONE_PCT=$(calc "100 * d / hz / (b - a)" d=$((c1 - c0)) hz="$TICK" a="$t0" b="$t1")
    echo "{\"case\": \"target-alone\", \"repeat\": $rep, \"target_cpu_pct\": $ALONE_PCT}" | tee -a "$RESULTS" >&2
    collect cpu-500ms "$LIVE" 500ms "$CPU_WINDOW" "$TARGET_PID"
    collect cpu-100ms "$LIVE" 100ms "$CPU_WINDOW" "$TARGET_PID"
    collect static-1ms "$STATIC" 1ms "$DURATION"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

if [ -n "${STRACE:-}" ]; then
    echo "--- syscall summary (wall time) of the collector at 1ms against the free target (10 s)" >&2
    strace -c -w -f -o "$WORK/strace.txt" "$HW" collect "$STATIC" --out "$WORK/strace-run" \
        --interval 1ms --memstats-interval 0 --duration 10s --quiet
    head -n 20 "$WORK/strace.txt"
fi

echo
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)," \
    "run directories on $(df -T "$WORK" | awk 'NR == 2 { print $2 }') ($(df "$WORK" | awk 'NR == 2 { print $1 }'))"
echo "target: bigprofile -listen -stacks $STACKS -churn $CHURN; heap profile $PROFILE_BYTES bytes gzipped"
echo "load average before: $LOAD_BEFORE; after: $LOAD_AFTER; repeats: $REPEATS," \
    "collector runs of ${DURATION}s, CPU windows of ${CPU_WINDOW}s"
echo
python3 "$STATS" table "$RESULTS"
