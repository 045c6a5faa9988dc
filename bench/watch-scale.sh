#!/usr/bin/env bash
# What `heapwatch watch` costs on a node, and how it grows with the number of Go processes. For
# each count in COUNTS, lays out a kubelet's node for real (one burstable pod per Go process,
# cgroupfs layout under a v1 memory cgroup, the pods and containers log directories; each
# process an idle Go service, testdata/go/procheap, far from its limit), starts
#   heapwatch watch --baseline 10s (defaults otherwise)
# waits WARMUP seconds (every container found, its first captures made), then measures over
# SECONDS_MEASURED: watch's CPU (user+sys from /proc/PID/stat) as a share of one core, its RSS
# at the end and its peak (VmHWM), its threads, and the captures stored. For docs/benchmarks.md.
# Needs root (v1 memory cgroups), cargo, go.
# Settings: COUNTS="10 50" WARMUP=15 SECONDS_MEASURED=60 BENCH_DIR=$TMPDIR
# WATCH_ARGS="--memory-interval 1s" adds flags to watch's command.
# THREADS=1 also prints, on stderr, watch's CPU by thread name over its whole life.
# OLD=/path/to/heapwatch measures that binary too, on the same node in the same run, just
# before this tree's (e.g. an earlier commit's release build: see docs/benchmarks.md).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
COUNTS=${COUNTS:-10 50}
WARMUP=${WARMUP:-15}
SECONDS_MEASURED=${SECONDS_MEASURED:-60}
MEM=/sys/fs/cgroup/memory
[ -w "$MEM" ] || { echo "needs root and a v1 memory hierarchy at $MEM" >&2; exit 2; }

WORK=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/heapwatch-watch-bench.XXXXXX")
TOP=
PIDS=()
WATCH=
teardown() {
    local pid dir
    if [ -n "$WATCH" ]; then kill -TERM "$WATCH" 2>/dev/null || true; wait "$WATCH" 2>/dev/null || true; fi
    WATCH=
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
    if [ -n "$TOP" ] && [ -d "$TOP" ]; then
        find "$TOP" -depth -type d | while read -r dir; do
            for _ in $(seq 50); do
                if rmdir "$dir" 2>/dev/null; then break; fi
                sleep 0.05
            done
        done
    fi
    TOP=
    return 0
}
cleanup() { teardown; rm -rf "$WORK"; }
trap cleanup EXIT

echo "building (release) ..." >&2
(cd "$ROOT" && cargo build --release --quiet --bin heapwatch)
HW=$ROOT/target/release/heapwatch
(cd "$ROOT/testdata/go/procheap" && CGO_ENABLED=0 go build -trimpath -o "$WORK/goapp" .)

hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# layout COUNT: the node, its processes running; sets CG_ROOT and PODS
layout() {
    local count=$1 i uid cid pod logs
    TOP=$MEM/heapwatch-bench-watch-$$-$count
    logs=$WORK/logs-$count
    mkdir -p "$TOP/kubepods/burstable" "$logs/pods" "$logs/containers"
    for i in $(seq "$count"); do
        uid=$(hex 4)-$(hex 2)-$(hex 2)-$(hex 2)-$(hex 6)
        pod=$TOP/kubepods/burstable/pod$uid
        mkdir "$pod"
        cid=$(hex 32)
        mkdir "$pod/$cid"
        echo $((128 << 20)) > "$pod/$cid/memory.limit_in_bytes"
        mkdir -p "$logs/pods/bench_app-${i}_$uid/app"
        ln -s "$logs/pods/bench_app-${i}_$uid/app/0.log" "$logs/containers/app-${i}_bench_app-$cid.log"
        sh -c "echo \$\$ > $pod/$cid/cgroup.procs && exec $WORK/goapp" \
            > "$logs/pods/bench_app-${i}_$uid/app/0.log" 2>&1 &
        PIDS+=($!)
    done
    for _ in $(seq 600); do
        [ "$(grep -l '^listening on' "$logs"/pods/*/app/0.log 2>/dev/null | wc -l)" -ge "$count" ] && break
        sleep 0.1
    done
    CG_ROOT=$TOP/kubepods
    PODS=$logs/pods
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }

HZ=$(getconf CLK_TCK)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
printf '%s\n' "| binary | Go processes | containers recorded | CPU (share of one core) | RSS at end | peak RSS | threads | captures stored in ${SECONDS_MEASURED} s | load |"
printf '%s\n' "|---|---|---|---|---|---|---|---|---|"
# measure LABEL BINARY COUNT: one watch over the node laid out, its row of the table
measure() {
    local label=$1 bin=$2 count=$3 out t0 t1 stored_before stored_after rss hwm threads nodes cpu
    out=$WORK/run-$count-$label
    "$bin" watch --out "$out" --cgroup-root "$CG_ROOT" --pods-dir "$PODS" --baseline 10s -q ${WATCH_ARGS:-} &
    WATCH=$!
    sleep "$WARMUP"
    stored_before=$(cat "$out"/targets/*/manifest.jsonl 2>/dev/null | grep -c '"file"' || true)
    t0=$(ticks "$WATCH")
    sleep "$SECONDS_MEASURED"
    t1=$(ticks "$WATCH")
    stored_after=$(cat "$out"/targets/*/manifest.jsonl 2>/dev/null | grep -c '"file"' || true)
    rss=$(status "$WATCH" VmRSS)
    hwm=$(status "$WATCH" VmHWM)
    threads=$(status "$WATCH" Threads)
    nodes=$(find "$out/targets" -mindepth 1 -maxdepth 1 -type d | wc -l)
    cpu=$(echo "scale=2; ($t1 - $t0) * 100 / ($HZ * $SECONDS_MEASURED)" | bc)
    printf '| %s | %s | %s | %s %% | %s MiB | %s MiB | %s | %s | %s |\n' \
        "$label" "$count" "$nodes" "$cpu" "$((rss / 1024))" "$((hwm / 1024))" "$threads" \
        "$((stored_after - stored_before))" "$(cut -d' ' -f1 /proc/loadavg)"
    if [ -n "${THREADS:-}" ]; then
        for t in /proc/"$WATCH"/task/*; do
            printf '%s %s\n' "$(cat "$t/comm")" "$(awk '{print $14 + $15}' "$t/stat")"
        done | awk -v label="$label" -v n="$count" -v hz="$HZ" \
            '{cpu[$1] += $2; threads[$1]++} END {for (k in cpu) printf "%s %s: %s: %d thread(s), %.2f s\n", label, n, k, threads[k], cpu[k] / hz}' \
            | sort -t: -k3 -rn >&2
    fi
    kill -TERM "$WATCH" 2>/dev/null || true
    wait "$WATCH" 2>/dev/null || true
    WATCH=
}
for count in $COUNTS; do
    layout "$count"
    if [ -n "${OLD:-}" ]; then measure old "$OLD" "$count"; fi
    measure new "$HW" "$count"
    teardown
done
