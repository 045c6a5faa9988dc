#!/usr/bin/env bash
# What building the site index in the collector costs a capture: the same live target
# (bigprofile -stacks 25000 -churn 32MiB, ~276 KB gzipped, every capture distinct with --gc)
# collected in turn by BEFORE (a build without the indexer) and this tree's release build,
# ROUNDS rounds of DURATION seconds each. Prints per run: stored captures, capture-to-durable
# p50/p99 (the manifest's durable_ms), the collector's CPU seconds per capture, and whether
# every stored capture got its index entry (`heapwatch index` then builds none).
#
#   BEFORE=/path/to/old/heapwatch bash bench/collect-index-cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-20}
BEFORE=${BEFORE:?a heapwatch built without the site index}
AFTER=${HEAPWATCH:-$PWD/target/release/heapwatch}
[ -n "${HEAPWATCH:-}" ] || cargo build --release --quiet
WORK=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-index-cost.XXXXXX")
(cd testdata/go && CGO_ENABLED=0 go build -trimpath -o "$WORK/bigprofile" ./cmd/bigprofile)
"$WORK/bigprofile" -listen 127.0.0.1:0 -stacks 25000 -churn 32MiB > "$WORK/target.out" &
TARGET=$!
trap 'kill $TARGET 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do grep -q listening "$WORK/target.out" 2>/dev/null && break; sleep 0.1; done
ADDR=$(sed -n 's/^listening on //p' "$WORK/target.out" | head -1)

one() { # label binary
    local run=$WORK/run-$1-$round
    /usr/bin/time -f '%U %S' -o "$WORK/time.txt" "$2" collect "http://$ADDR" --out "$run" \
        --gc --interval 10ms --max-duty 1 --memstats-interval 0 --duration "${DURATION}s" --quiet || true
    read -r user sys < "$WORK/time.txt"
    local rebuilt
    rebuilt=$("$AFTER" index "$run" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["rebuilt"])')
    python3 - "$run/manifest.jsonl" "$1" "$user" "$sys" "$rebuilt" <<'PY'
import json, sys
path, label, user, sys_, rebuilt = sys.argv[1:]
recs = [json.loads(l) for l in open(path) if l.strip()]
d = sorted(r["durable_ms"] for r in recs if r.get("durable_ms") is not None)
q = lambda p: d[min(len(d) - 1, int(p * len(d)))]
cpu = float(user) + float(sys_)
print(f"{label:7} stored {len(d):4}  durable p50 {q(0.5):6.1f} ms  p99 {q(0.99):6.1f} ms  "
      f"CPU {cpu / max(len(d), 1) * 1000:6.1f} ms/capture  entries left to build {rebuilt}")
PY
}
echo "$(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
    one before "$BEFORE"
    one after "$AFTER"
done
