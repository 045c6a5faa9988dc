#!/usr/bin/env bash
# What node discovery costs, and how it grows with the number of Go processes. For each count
# in COUNTS, lays out a kubelet's node for real (one burstable pod per Go process, an idle Go
# service with a non-Go "pause" container beside it, cgroupfs layout under a v1 memory cgroup, the
# pods and containers log directories) and measures, on that node:
#   discovery    examples/node_rescan: the first scan, then N rescans of the steady node (what
#                `watch` pays every second), then N reads of every container's memory
#   ps           `heapwatch ps --no-heap` and `heapwatch ps` (heaps read from memory) as whole
#                commands, wall and CPU, best of 3
# for docs/benchmarks.md. Needs root (v1 memory cgroups), cargo, go, GNU time.
# Settings: COUNTS="10 50 100 200" N=200 BENCH_DIR=$TMPDIR
# EXAMINE=CMD runs CMD on each node instead of measuring it (CG_ROOT and PODS exported), e.g.
# EXAMINE='perf record -g -o /tmp/p.data target/release/examples/node_rescan $CG_ROOT $PODS 2000'.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
COUNTS=${COUNTS:-10 50 100 200}
N=${N:-200}
MEM=/sys/fs/cgroup/memory
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time (apt-get install -y time)" >&2; exit 2; }
[ -w "$MEM" ] || { echo "needs root and a v1 memory hierarchy at $MEM" >&2; exit 2; }

WORK=$(mktemp -d "${BENCH_DIR:-${TMPDIR:-/tmp}}/heapwatch-node-bench.XXXXXX")
TOP=
PIDS=()
teardown() {
    local pid dir
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
    if [ -n "$TOP" ] && [ -d "$TOP" ]; then
        # Deepest first; an emptied cgroup may stay busy for a moment.
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
(cd "$ROOT" && cargo build --release --quiet --bin heapwatch --example node_rescan)
HW=$ROOT/target/release/heapwatch
RESCAN=$ROOT/target/release/examples/node_rescan
# An idle Go service: testdata/go/procheap builds a known heap, serves pprof and waits (no CPU
# of its own, so 200 of them leave the machine to the measurement).
(cd "$ROOT/testdata/go/procheap" && CGO_ENABLED=0 go build -trimpath -o "$WORK/goapp" .)

hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# layout COUNT: the node, its processes running; sets CG_ROOT and PODS
layout() {
    local count=$1 i uid cid pcid pod ctr logs
    TOP=$MEM/heapwatch-bench-node-$$-$count
    logs=$WORK/logs-$count
    mkdir -p "$TOP/kubepods/burstable" "$logs/pods" "$logs/containers"
    for i in $(seq "$count"); do
        uid=$(hex 4)-$(hex 2)-$(hex 2)-$(hex 2)-$(hex 6)
        pod=$TOP/kubepods/burstable/pod$uid
        mkdir "$pod"
        echo $((256 << 20)) > "$pod/memory.limit_in_bytes"
        pcid=$(hex 32)
        mkdir "$pod/$pcid"
        sh -c "echo \$\$ > $pod/$pcid/cgroup.procs && exec sleep infinity" &
        PIDS+=($!)
        cid=$(hex 32)
        mkdir "$pod/$cid"
        echo $((128 << 20)) > "$pod/$cid/memory.limit_in_bytes"
        mkdir -p "$logs/pods/bench_app-${i}_$uid/app"
        : > "$logs/pods/bench_app-${i}_$uid/app/0.log"
        ln -s "$logs/pods/bench_app-${i}_$uid/app/0.log" "$logs/containers/app-${i}_bench_app-$cid.log"
        sh -c "echo \$\$ > $pod/$cid/cgroup.procs && exec $WORK/goapp" \
            > "$logs/pods/bench_app-${i}_$uid/app/0.log" 2>&1 &
        PIDS+=($!)
    done
    # Every Go process listening (its first line) before anything is measured.
    for _ in $(seq 600); do
        [ "$(grep -l '^listening on' "$logs"/pods/*/app/0.log 2>/dev/null | wc -l)" -ge "$count" ] && break
        sleep 0.1
    done
    CG_ROOT=$TOP/kubepods
    PODS=$logs/pods
}

# best3 CMD...: the best wall and its CPU (user+sys) of three runs, "wall_s cpu_s"
best3() {
    local best=
    for _ in 1 2 3; do
        /usr/bin/time -f '%e %U %S' -o "$WORK/time" "$@" > /dev/null 2>&1
        read -r wall user sys < "$WORK/time"
        local cpu
        cpu=$(echo "$user + $sys" | bc)
        if [ -z "$best" ] || [ "$(echo "$wall < ${best%% *}" | bc)" = 1 ]; then best="$wall $cpu"; fi
    done
    echo "$best"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
printf '%s\n' "| Go processes | processes seen | first scan | rescan median (p90) | rescan CPU | memory of every container | ps --no-heap wall (CPU) | ps wall (CPU) | load |"
printf '%s\n' "|---|---|---|---|---|---|---|---|---|"
for count in $COUNTS; do
    layout "$count"
    root=$CG_ROOT pods=$PODS
    sleep 1
    if [ -n "${EXAMINE:-}" ]; then
        export CG_ROOT PODS
        bash -c "$EXAMINE" >&2
        teardown
        continue
    fi
    json=$("$RESCAN" "$root" "$pods" "$N")
    get() { echo "$json" | sed -E "s/.*\"$1\": ([0-9.]+).*/\1/"; }
    read -r nh_wall nh_cpu < <(best3 "$HW" ps --no-heap --cgroup-root "$root" --pods-dir "$pods")
    read -r ps_wall ps_cpu < <(best3 "$HW" ps --cgroup-root "$root" --pods-dir "$pods")
    printf '| %s | %s | %s ms | %s ms (%s) | %s ms | %s ms | %s s (%s s) | %s s (%s s) | %s |\n' \
        "$(get go_processes)" "$(get processes_seen)" "$(get first_scan_ms)" \
        "$(get rescan_median_ms)" "$(get rescan_p90_ms)" "$(get rescan_cpu_ms)" \
        "$(get memory_reads_all_median_ms)" "$nh_wall" "$nh_cpu" "$ps_wall" "$ps_cpu" \
        "$(cut -d' ' -f1 /proc/loadavg)"
    echo "  $json" >&2
    teardown
done
