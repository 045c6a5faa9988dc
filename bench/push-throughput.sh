#!/usr/bin/env bash
# Benchmark of the Pyroscope push against a receiver that answers as Pyroscope v2 does, once
# its segment is flushed (testdata/go/pyroscope-receiver -delay D: each push judged, held D,
# then stored and answered), for docs/benchmarks.md. Two parts, for each DELAYS value:
#
#   push    `heapwatch push` of a recorded run made long (testdata/runs/RUN repeated COPIES
#           times as successive boot cycles, profiles copied): captures/s, requests, wall.
#   live    `collect --push` of testdata/go/cmd/steady at --interval 100ms with a GC per
#           capture, heap and goroutine profiles (up to 20 captures/s), for DURATION seconds,
#           --push-drain 10s: captures stored/s, delivered while collecting, unsent at exit,
#           how long the drain took, and the captures' durable_ms (last byte → fsynced) beside
#           the same collect without --push, run first.
#
#   bash bench/push-throughput.sh      (DELAYS="0 100ms 500ms 1s" RUN=oomgrow COPIES=10
#                                       DURATION=30 PARTS="push live" HEAPWATCH=PATH)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DELAYS=${DELAYS:-"0 100ms 500ms 1s"}
RUN=${RUN:-oomgrow}
COPIES=${COPIES:-10}
DURATION=${DURATION:-30}
PARTS=${PARTS:-"push live"}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-push-bench.XXXXXX")
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${HEAPWATCH:-}" ]; then
    cargo build --release --quiet
    HEAPWATCH=$ROOT/target/release/heapwatch
fi
(cd testdata/go/pyroscope-receiver && CGO_ENABLED=0 go build -trimpath -o "$WORK/receiver" .)
(cd testdata/go && go build -o "$WORK/steady" ./cmd/steady)

# Starts a receiver with -delay $1 into $WORK/r-$2; sets URL and RECEIVER.
start_receiver() {
    local dir="$WORK/r-$2"
    mkdir -p "$dir"
    "$WORK/receiver" -out "$dir/events.jsonl" -reject-older-than 0 -delay "$1" >"$dir/out" 2>&1 &
    RECEIVER=$!
    PIDS+=("$RECEIVER")
    for _ in $(seq 200); do grep -q '^listening on ' "$dir/out" 2>/dev/null && break; sleep 0.05; done
    URL="http://$(sed -n 's/^listening on //p' "$dir/out")"
}

stop_receiver() {
    kill "$RECEIVER" 2>/dev/null || true
    wait "$RECEIVER" 2>/dev/null || true
}

ms() { echo $(( $(date +%s%N) / 1000000 )); }

# The long run: RUN's manifest COPIES times, each copy a boot cycle of its own after the last.
make_long_run() {
    python3 - "testdata/runs/$RUN" "$1" "$COPIES" <<'EOF'
import json, os, shutil, sys
src, dst, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(os.path.join(dst, "profiles"))
shutil.copy(os.path.join(src, "run.json"), dst)
records = [json.loads(l) for l in open(os.path.join(src, "manifest.jsonl")) if l.strip()]
top_seq = max(r["seq"] for r in records)
top_cycle = max(r["incarnation"] for r in records)
out = open(os.path.join(dst, "manifest.jsonl"), "w")
for k in range(copies):
    renamed = {}
    for r in records:
        r = dict(r)
        r["seq"] += k * top_seq
        r["incarnation"] += k * top_cycle
        for key in ("dup_of", "deleted_seq"):
            if r.get(key) is not None:
                r[key] += k * top_seq
        f = r.get("file")
        if f:
            if f not in renamed:
                name = os.path.basename(f)
                seq, rest = name.split("-", 1)
                new = "profiles/%06d-%s" % (int(seq) + k * top_seq, rest)
                shutil.copy(os.path.join(src, f), os.path.join(dst, new))
                renamed[f] = new
            r["file"] = renamed[f]
        out.write(json.dumps(r) + "\n")
EOF
}

if [[ " $PARTS " == *" push "* ]]; then
    make_long_run "$WORK/template"
    SENT=$(python3 -c "
import json
n = 0
for l in open('$WORK/template/manifest.jsonl'):
    r = json.loads(l)
    f = r.get('file') or ''
    n += r['kind'] in ('heap', 'goroutine') and f.endswith('.pb.gz') and r.get('error') is None
print(n)")
    echo "## heapwatch push of testdata/runs/$RUN × $COPIES ($SENT captures), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "| receiver answers after | wall ms | captures/s | requests | most in flight |"
    echo "| --- | --- | --- | --- | --- |"
    for delay in $DELAYS; do
        start_receiver "$delay" "push-$delay"
        dir="$WORK/push-$delay"
        cp -r "$WORK/template" "$dir"
        t0=$(ms)
        "$HEAPWATCH" push "$dir" --to "$URL" >/dev/null
        t1=$(ms)
        stop_receiver
        python3 - "$WORK/r-push-$delay/events.jsonl" "$delay" "$((t1 - t0))" "$SENT" <<'EOF'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
arrived = [e for e in events if e["event"] == "arrived"]
accepted = [e for e in events if e["event"] == "accepted"]
wall, sent = int(sys.argv[3]), int(sys.argv[4])
assert len(accepted) == sent, (len(accepted), sent)
most = max((e.get("in_flight", 0) for e in arrived), default=0)
print(f"| {sys.argv[2]} | {wall} | {sent / (wall / 1000):.0f} | {len(arrived)} | {most} |")
EOF
    done
fi

if [[ " $PARTS " == *" live "* ]]; then
    echo
    echo "## collect --push, --interval 100ms --gc --profiles heap,goroutine --goroutine-interval 100ms, ${DURATION}s, --push-drain 10s; load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "| receiver answers after | stored | stored/s | delivered by the end of collecting | left unsent at exit | drain s | requests | most in flight | durable_ms p50 / p99 |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    "$WORK/steady" -listen 127.0.0.1:0 -working-set 4MiB -rate 48MiB >"$WORK/steady.out" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 200); do grep -q 'listening on ' "$WORK/steady.out" 2>/dev/null && break; sleep 0.05; done
    TARGET="http://$(sed -n 's/.*listening on //p' "$WORK/steady.out" | head -1)"
    "$HEAPWATCH" collect "$TARGET" --out "$WORK/live-none" --interval 100ms --gc \
        --profiles heap,goroutine --goroutine-interval 100ms --duration "${DURATION}s" -q || true
    python3 - "$WORK/live-none" "$DURATION" <<'EOF'
import json, sys
run, duration = sys.argv[1], int(sys.argv[2])
stored = [json.loads(l) for l in open(run + "/manifest.jsonl") if l.strip()]
stored = [r for r in stored if r["kind"] in ("heap", "goroutine") and r.get("error") is None
          and (r.get("file") or "").endswith(".pb.gz")]
d = sorted(r["durable_ms"] for r in stored if r.get("durable_ms") is not None)
p = lambda q: d[min(len(d) - 1, round(q * (len(d) - 1)))]
print(f"| no --push | {len(stored)} | {len(stored) / duration:.1f} | — | — | — | — | — | "
      f"{p(0.5):.2f} / {p(0.99):.2f} |")
EOF
    for delay in $DELAYS; do
        start_receiver "$delay" "live-$delay"
        dir="$WORK/live-$delay"
        t0=$(ms)
        "$HEAPWATCH" collect "$TARGET" --out "$dir" --interval 100ms --gc \
            --profiles heap,goroutine --goroutine-interval 100ms --duration "${DURATION}s" \
            --push "$URL" --push-drain 10s -q 2>"$dir.stderr" || true
        t1=$(ms)
        stop_receiver
        python3 - "$dir" "$WORK/r-live-$delay/events.jsonl" "$delay" "$t0" "$t1" "$DURATION" <<'EOF'
import json, sys
run, events_file, delay, t0, t1, duration = sys.argv[1:7]
t0, t1, duration = int(t0), int(t1), int(duration)
stored = [json.loads(l) for l in open(run + "/manifest.jsonl") if l.strip()]
stored = [r for r in stored if r["kind"] in ("heap", "goroutine") and r.get("error") is None
          and (r.get("file") or "").endswith(".pb.gz")]
end = max(r["t_ms"] for r in stored)
events = [json.loads(l) for l in open(events_file) if l.strip()]
accepted = [e for e in events if e["event"] == "accepted"]
arrived = [e for e in events if e["event"] == "arrived"]
by_end = sum(1 for e in accepted if e["unix_ms"] <= end)
outcomes = [json.loads(l) for l in open(run + "/pushes.jsonl") if l.strip()]
delivered = {o["seq"] for o in outcomes if o["outcome"] == "delivered"}
unsent = len(stored) - len(delivered)
drain = (t1 - t0) / 1000 - duration
most = max((e.get("in_flight", 0) for e in arrived), default=0)
d = sorted(r["durable_ms"] for r in stored if r.get("durable_ms") is not None)
p = lambda q: d[min(len(d) - 1, round(q * (len(d) - 1)))]
print(f"| {delay} | {len(stored)} | {len(stored) / duration:.1f} | {by_end} | {unsent} | "
      f"{drain:.1f} | {len(arrived)} | {most} | {p(0.5):.2f} / {p(0.99):.2f} |")
EOF
    done
fi
