#!/usr/bin/env bash
# Capture-to-durable (`durable_ms`: last byte received -> profile fsynced, named, folder
# fsynced) of ~1 MB heap profiles, the request latency, and the collector's CPU and peak RSS,
# for two heapwatch builds side by side in one run (BEFORE and AFTER, alternating round by
# round so both see the same machine load), on the ordinary disk and on a slow one: an ext4
# loop device whose writes are throttled by a cgroup v1 blkio rule the collector runs under.
# Two targets (TARGETS):
# - go: a real Go process, testdata/go/cmd/bigprofile -listen, holding 100,000 distinct
#   allocation stacks at MemProfileRate=1 and churning 8 MB/s, so successive captures differ.
#   Go's net/http/pprof gzips while it writes, so a ~1 MB body arrives over as long as the
#   target takes to render it (hundreds of ms here, with every allocation sampled), as from a
#   real service: what a collector that takes the body in as it arrives gains on.
# - static: bench/collect-static-target.py serving three distinct ~1 MB profiles made by the
#   same program in turn, each body sent at once, so nothing measures the target.
# Besides the median over rounds of each collect's p50/p99, the p50/p99/max of every stored
# capture of a case pooled over all its rounds is printed, with the load averages seen.
#
# usage: BEFORE=/path/to/old/heapwatch [AFTER=target/release/heapwatch] bench/collect-durable.sh
# Settings (environment): ROUNDS=3 DURATION=15 (seconds per collect) INTERVAL=100ms,
# TARGETS="go static", SLOW=1 (0: skip the slow disk), THROTTLE_BPS=4194304
# THROTTLE_IOPS=20 (the slow disk's write limits). Needs root for the loop device and the
# cgroup, go, python3, GNU time.
# Everything made is removed on exit: the loop device, its mount, its file, the cgroup.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BEFORE=${BEFORE:?BEFORE=path of the heapwatch binary to compare against}
AFTER=${AFTER:-$ROOT/target/release/heapwatch}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-15}
INTERVAL=${INTERVAL:-100ms}
SLOW=${SLOW:-1}
TARGETS=${TARGETS:-go static}
THROTTLE_BPS=${THROTTLE_BPS:-4194304}
THROTTLE_IOPS=${THROTTLE_IOPS:-20}
STATS="$ROOT/bench/collect-stats.py"

[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-durable-bench.XXXXXX")
CGROUP=/sys/fs/cgroup/blkio/heapwatch-durable-bench-$$
LOOP=""
SERVER=""
GO_TARGET=""
cleanup() {
    [ -n "$SERVER" ] && { kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; }
    [ -n "$GO_TARGET" ] && { kill "$GO_TARGET" 2>/dev/null || true; wait "$GO_TARGET" 2>/dev/null || true; }
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

python3 "$ROOT/bench/collect-static-target.py" "$WORK"/profiles/*.pb.gz >"$WORK/static.out" 2>"$WORK/static.err" &
SERVER=$!
for _ in $(seq 100); do
    ADDR=$(sed -n 's/^listening on //p' "$WORK/static.out")
    [ -n "$ADDR" ] && break
    sleep 0.1
done
[ -n "$ADDR" ] || { cat "$WORK/static.err" >&2; exit 1; }
STATIC_ADDR=$ADDR

GO_ADDR=""
case " $TARGETS " in *" go "*)
    "$WORK/bigprofile" -listen 127.0.0.1:0 -stacks 100000 >"$WORK/go.out" 2>"$WORK/go.err" &
    GO_TARGET=$!
    for _ in $(seq 300); do
        GO_ADDR=$(sed -n 's/^listening on //p' "$WORK/go.out")
        [ -n "$GO_ADDR" ] && break
        sleep 0.1
    done
    [ -n "$GO_ADDR" ] || { cat "$WORK/go.err" >&2; exit 1; }
    curl -s "http://$GO_ADDR/debug/pprof/heap" | wc -c | sed 's/^/go target: heap profile of /; s/$/ bytes/' >&2
    ;;
esac

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

RESULTS="$WORK/results.jsonl"
n=0
for round in $(seq "$ROUNDS"); do
  for target in $TARGETS; do
    ADDR=$STATIC_ADDR
    [ "$target" = go ] && ADDR=$GO_ADDR
    for disk in $DISKS; do
        for build in before after; do
            n=$((n + 1))
            hw=$BEFORE
            [ "$build" = after ] && hw=$AFTER
            out="$WORK/$disk/run-$n"
            cg=""
            [ "$disk" = slow ] && cg=$CGROUP/cgroup.procs
            case="$target-$disk-$build"
            load="$(cut -d' ' -f1 /proc/loadavg)"
            # The shell joins the cgroup (if any) and becomes time, which runs the collector.
            sh -c '[ -n "$1" ] && echo $$ >"$1"; shift; exec "$@"' sh "$cg" \
                /usr/bin/time -f "%U %S %M" -o "$WORK/time.$n" \
                "$hw" collect "http://$ADDR" --out "$out" --interval "$INTERVAL" \
                --duration "${DURATION}s" --timeout 10s --max-duty 1 --memstats-interval 0s \
                --quiet || true
            read -r user sys rss <"$WORK/time.$n"
            python3 "$STATS" run "$out" "$DURATION" case="$case" round="$round" \
                cpu_s="$(python3 -c "print(round($user + $sys, 2))")" rss_mib="$(python3 -c "print(round($rss / 1024, 1))")" \
                load="$load" >>"$RESULTS"
            tail -1 "$RESULTS" >&2
            # Every stored capture's durable_ms, for the pooled percentiles.
            python3 -c '
import json, sys
for line in open(sys.argv[1] + "/manifest.jsonl"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("kind") == "heap" and r.get("durable_ms") is not None and r.get("dup_of") is None:
        print(r["durable_ms"])
' "$out" >>"$WORK/durable-$case.txt"
            rm -rf "$out"
        done
    done
  done
done

python3 - "$RESULTS" "$WORK" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cases = {}
for r in rows:
    cases.setdefault(r["case"], []).append(r)
keys = [("captures_per_s", "captures/s"), ("latency_p50_ms", "latency p50"),
        ("latency_p99_ms", "latency p99"), ("durable_p50_ms", "durable p50"),
        ("durable_p99_ms", "durable p99"), ("cpu_s", "CPU s (user+sys)"),
        ("rss_mib", "peak RSS MiB"), ("load", "load avg")]
def med(case, key):
    v = [r[key] for r in cases.get(case, []) if r.get(key) is not None]
    return statistics.median(v) if v else None
print("| measure (median of %d rounds) | " % max(len(v) for v in cases.values())
      + " | ".join(sorted(cases)) + " |")
print("|---|" + "---:|" * len(cases))
for key, label in keys:
    print("| %s | %s |" % (label, " | ".join("-" if med(c, key) is None else "%.2f" % med(c, key) for c in sorted(cases))))
def pooled(case):
    path = os.path.join(sys.argv[2], "durable-%s.txt" % case)
    if not os.path.exists(path):
        return []
    return sorted(float(l) for l in open(path) if l.strip())
def pct(v, p):
    return v[max(1, -(-len(v) * p // 100)) - 1] if v else None
print("\nEvery stored capture of a case, pooled over its rounds:\n")
print("| case | captures | durable p50 | durable p90 | durable p99 | durable max | over 20 ms | load avg (min-max) |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for c in sorted(cases):
    v = pooled(c)
    loads = [r["load"] for r in cases[c]]
    if v:
        print("| %s | %d | %.2f | %.2f | %.2f | %.2f | %d | %.2f-%.2f |" % (
            c, len(v), pct(v, 50), pct(v, 90), pct(v, 99), v[-1], sum(x > 20 for x in v),
            min(loads), max(loads)))
for prefix in sorted({c.rsplit("-", 1)[0] for c in cases}):
    b, a = pooled(prefix + "-before"), pooled(prefix + "-after")
    if b and a:
        print("\n%s: pooled durable p50 after/before = %.2f, p99 after/before = %.2f"
              % (prefix, pct(a, 50) / pct(b, 50), pct(a, 99) / pct(b, 99)))
PY
