#!/usr/bin/env bash
# What a second and third target cost one `collect` (issue 11): collector CPU (user+sys), CPU
# per capture and peak RSS of `collect T1` against `collect T1 T2 T3` (a cluster run, each node
# a task of one tokio runtime), side by side in one run, alternating which goes first round by
# round so both see the same machine load; per node, captures/s and `durable_ms` p50/p99 from
# each node's manifest.jsonl (RUN/targets/NAME/manifest.jsonl in the cluster run). On the
# ordinary disk and, with SLOW=1, on a slow one: an ext4 loop device whose writes are
# throttled by a cgroup v1 blkio rule the collector runs under (the limit is the device's, so
# three nodes share it). Targets: three bench/collect-static-target.py servers on loopback,
# each serving three distinct ~1 MB heap profiles (testdata/go/cmd/bigprofile) in turn, so
# every capture is stored and nothing measures the targets.
#
# usage: [HW=target/release/heapwatch] bench/collect-cluster.sh
# Settings (environment): ROUNDS=3 DURATION=15 (seconds per collect) INTERVAL=100ms,
# SLOW=0 (1: also the slow disk), THROTTLE_BPS=4194304 THROTTLE_IOPS=20 (its write limits).
# Needs go, python3, GNU time; root for SLOW=1 (loop device, mount, cgroup).
# Everything made is removed on exit: the servers, runs, loop device, its mount and file,
# the cgroup.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HW=${HW:-$ROOT/target/release/heapwatch}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-15}
INTERVAL=${INTERVAL:-100ms}
SLOW=${SLOW:-0}
THROTTLE_BPS=${THROTTLE_BPS:-4194304}
THROTTLE_IOPS=${THROTTLE_IOPS:-20}
STATS="$ROOT/bench/collect-stats.py"

[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time" >&2; exit 2; }
[ -x "$HW" ] || { echo "no heapwatch binary at $HW (cargo build --release)" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-cluster-bench.XXXXXX")
CGROUP=/sys/fs/cgroup/blkio/heapwatch-cluster-bench-$$
LOOP=""
SERVERS=()
cleanup() {
    for pid in "${SERVERS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    if mountpoint -q "$WORK/slow" 2>/dev/null; then umount "$WORK/slow"; fi
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null || true
    [ -d "$CGROUP" ] && rmdir "$CGROUP" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building the Go profile maker ..." >&2
(cd "$ROOT/testdata/go" && go build -o "$WORK/bigprofile" ./cmd/bigprofile)
mkdir -p "$WORK/profiles"
for s in 100000 100001 100002; do
    "$WORK/bigprofile" -stacks "$s" -o "$WORK/profiles/$s.pb.gz" >/dev/null
done
ls -l "$WORK/profiles" >&2

ADDRS=()
for i in 1 2 3; do
    python3 "$ROOT/bench/collect-static-target.py" "$WORK"/profiles/*.pb.gz \
        >"$WORK/static$i.out" 2>"$WORK/static$i.err" &
    SERVERS+=($!)
    addr=""
    for _ in $(seq 100); do
        addr=$(sed -n 's/^listening on //p' "$WORK/static$i.out")
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || { cat "$WORK/static$i.err" >&2; exit 1; }
    ADDRS+=("http://$addr")
done
echo "targets: ${ADDRS[*]}" >&2

DISKS="disk"
if [ "$SLOW" = 1 ]; then
    truncate -s 512M "$WORK/slow.img"
    mkfs.ext4 -q "$WORK/slow.img"
    LOOP=$(losetup -f --show "$WORK/slow.img")
    mkdir "$WORK/slow"
    mount "$LOOP" "$WORK/slow"
    mkdir "$CGROUP"
    DEV=$(lsblk -dno MAJ:MIN "$LOOP" | tr -d ' ')
    echo "$DEV $THROTTLE_BPS" >"$CGROUP/blkio.throttle.write_bps_device"
    echo "$DEV $THROTTLE_IOPS" >"$CGROUP/blkio.throttle.write_iops_device"
    DISKS="disk slow"
fi
mkdir "$WORK/disk"

# One row per node per collect: collect-stats.py's figures for the node plus the whole
# collector's CPU and RSS (the same on each node's row of one collect).
RESULTS="$WORK/results.jsonl"
n=0
for round in $(seq "$ROUNDS"); do
    order="1 3"
    [ $((round % 2)) = 0 ] && order="3 1"
    for disk in $DISKS; do
        for targets in $order; do
            n=$((n + 1))
            out="$WORK/$disk/run-$n"
            cg=""
            [ "$disk" = slow ] && cg=$CGROUP/cgroup.procs
            load=$(cut -d' ' -f1 /proc/loadavg)
            # The shell joins the cgroup (if any) and becomes time, which runs the collector.
            sh -c '[ -n "$1" ] && echo $$ >"$1"; shift; exec "$@"' sh "$cg" \
                /usr/bin/time -f "%U %S %M" -o "$WORK/time.$n" \
                "$HW" collect "${ADDRS[@]:0:$targets}" --out "$out" --interval "$INTERVAL" \
                --duration "${DURATION}s" --max-duty 1 --memstats-interval 0s --quiet || true
            read -r user sys rss <"$WORK/time.$n"
            if [ "$targets" = 1 ]; then
                nodes="$out"
            else
                nodes=$(python3 -c 'import json, sys
for t in json.load(open(sys.argv[1] + "/run.json"))["targets"]:
    print(sys.argv[1] + "/" + t["dir"])' "$out")
            fi
            node=0
            for dir in $nodes; do
                node=$((node + 1))
                python3 "$STATS" run "$dir" "$DURATION" case="$disk-$targets" round="$round" \
                    node="$node" user_s="$user" sys_s="$sys" rss_kib="$rss" load="$load" \
                    >>"$RESULTS"
                tail -1 "$RESULTS" >&2
            done
            rm -rf "$out"
        done
    done
done

python3 - "$RESULTS" "$DURATION" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
seconds = float(sys.argv[2])
# case -> round -> [node rows]
runs = {}
for r in rows:
    runs.setdefault(r["case"], {}).setdefault(r["round"], []).append(r)

def per_run(case):
    """One figure set per collect (per round) of a case."""
    out = []
    for rnd, nodes in sorted(runs[case].items()):
        cpu = nodes[0]["user_s"] + nodes[0]["sys_s"]
        captures = sum(n["captures"] for n in nodes)
        out.append({
            "cpu_s": cpu,
            "cpu_ms_per_capture": 1000 * cpu / captures if captures else None,
            "rss_mib": nodes[0]["rss_kib"] / 1024,
            "captures_per_s_node": statistics.mean(n["captures_per_s"] for n in nodes),
            "captures_per_s_min_node": min(n["captures_per_s"] for n in nodes),
            "errors": sum(n["errors"] for n in nodes),
            "durable_p50_ms": statistics.median(n["durable_p50_ms"] for n in nodes if n["durable_p50_ms"] is not None),
            "durable_p99_ms": max(n["durable_p99_ms"] for n in nodes if n["durable_p99_ms"] is not None),
            "load": nodes[0]["load"],
        })
    return out

keys = [("cpu_s", "collector CPU s (user+sys) per %g s" % seconds),
        ("cpu_ms_per_capture", "CPU ms per capture"),
        ("rss_mib", "peak RSS MiB"),
        ("captures_per_s_node", "captures/s per node (mean of nodes)"),
        ("captures_per_s_min_node", "captures/s, slowest node"),
        ("errors", "failed attempts (all nodes)"),
        ("durable_p50_ms", "durable_ms p50 (median of nodes)"),
        ("durable_p99_ms", "durable_ms p99 (worst node)"),
        ("load", "load avg at start")]
cases = sorted(runs, key=lambda c: (c.split("-")[0] != "disk", c))
figures = {c: per_run(c) for c in cases}
def med(case, key):
    v = [f[key] for f in figures[case] if f[key] is not None]
    return statistics.median(v) if v else None
print("| median of %d rounds | %s |" % (max(len(v) for v in figures.values()),
      " | ".join("%s, %s target%s" % (c.split("-")[0], c.split("-")[1], "" if c.endswith("-1") else "s") for c in cases)))
print("|---|" + "---:|" * len(cases))
for key, label in keys:
    print("| %s | %s |" % (label, " | ".join("-" if med(c, key) is None else "%.2f" % med(c, key) for c in cases)))
print()
print("per node, per round (captures/s; durable_ms p50/p99):")
for c in cases:
    for rnd, nodes in sorted(runs[c].items()):
        print("  %s round %s: %s" % (c, rnd, "; ".join(
            "node%d %.2f/s %s/%s" % (n["node"], n["captures_per_s"], n["durable_p50_ms"], n["durable_p99_ms"]) for n in nodes)))
print()
for disk in sorted({c.split("-")[0] for c in cases}):
    one, three = disk + "-1", disk + "-3"
    if one in figures and three in figures:
        ratios = ", ".join("%s %.2f" % (label, med(three, key) / med(one, key))
                           for key, label in [("cpu_s", "CPU"), ("cpu_ms_per_capture", "CPU per capture"),
                                              ("rss_mib", "peak RSS"), ("captures_per_s_node", "captures/s per node"),
                                              ("durable_p50_ms", "durable p50"), ("durable_p99_ms", "durable p99")]
                           if med(one, key))
        print("%s: 3 targets / 1 target: %s" % (disk, ratios))
PY
