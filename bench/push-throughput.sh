#!/usr/bin/env bash
# Benchmark of `heapwatch push`: a recorded run (testdata/runs/oomgrow, 113 captures to send)
# pushed to the test receiver (testdata/go/pyroscope-receiver) on loopback, for
# docs/benchmarks.md. REPEATS times, with the run directory on disk and on tmpfs (/dev/shm),
# so the cost of the one fsync per outcome in pushes.jsonl shows as the difference; then the
# second push of the same run (nothing to send). Prints wall ms and captures/s, median and range.
#
#   bash bench/push-throughput.sh          (REPEATS=5, RUN=oomgrow, HEAPWATCH=PATH for another build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
REPEATS=${REPEATS:-5}
RUN=${RUN:-oomgrow}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-push-bench.XXXXXX")
SHM=$(mktemp -d /dev/shm/heapwatch-push-bench.XXXXXX)
RECEIVER_PID=
cleanup() {
    if [ -n "$RECEIVER_PID" ]; then kill "$RECEIVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT

if [ -z "${HEAPWATCH:-}" ]; then
    cargo build --release --quiet
    HEAPWATCH=$ROOT/target/release/heapwatch
fi
(cd testdata/go/pyroscope-receiver && CGO_ENABLED=0 go build -trimpath -o "$WORK/receiver" .)

"$WORK/receiver" -out "$WORK/events.jsonl" -reject-older-than 0 >"$WORK/receiver.out" 2>&1 &
RECEIVER_PID=$!
for _ in $(seq 100); do grep -q '^listening on ' "$WORK/receiver.out" 2>/dev/null && break; sleep 0.05; done
URL="http://$(sed -n 's/^listening on //p' "$WORK/receiver.out")"

ms() { echo $(( $(date +%s%N) / 1000000 )); }

declare -A TIMES
for i in $(seq "$REPEATS"); do
    for place in disk tmpfs; do
        base=$WORK; [ "$place" = tmpfs ] && base=$SHM
        dir="$base/run-$i"
        rm -rf "$dir"
        cp -r "testdata/runs/$RUN" "$dir"
        t0=$(ms)
        "$HEAPWATCH" push "$dir" --to "$URL" >/dev/null
        t1=$(ms)
        "$HEAPWATCH" push "$dir" --to "$URL" >/dev/null
        t2=$(ms)
        TIMES[$place-first]+="$((t1 - t0)) "
        TIMES[$place-again]+="$((t2 - t1)) "
    done
done
SENT=$(grep -c '"outcome":"delivered"' "$WORK/run-1/pushes.jsonl")

python3 - "$SENT" "$REPEATS" "${TIMES[disk-first]}" "${TIMES[tmpfs-first]}" "${TIMES[disk-again]}" "${TIMES[tmpfs-again]}" <<'EOF'
import statistics, sys
sent, repeats = int(sys.argv[1]), int(sys.argv[2])
rows = [("first push, run on disk", sys.argv[3]), ("first push, run on tmpfs", sys.argv[4]),
        ("second push (nothing to send), disk", sys.argv[5]), ("second push, tmpfs", sys.argv[6])]
print(f"{sent} captures sent per first push, {repeats} repeats")
print("| push | wall ms, median (range) | captures/s |")
print("| --- | --- | --- |")
for name, text in rows:
    t = [int(x) for x in text.split()]
    med = statistics.median(t)
    rate = f"{sent / (med / 1000):.0f}" if name.startswith("first") else "—"
    print(f"| {name} | {med:.0f} ({min(t)}–{max(t)}) | {rate} |")
EOF
