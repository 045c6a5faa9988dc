#!/usr/bin/env bash
# Benchmark of `heapwatch growth` over a run of ~1,000 real captures of ~200 KB each:
# wall time and peak memory, against `go tool pprof -top -diff_base` over the consecutive
# pairs (the two-at-a-time way of doing the same by hand), and peak memory on a quarter and a
# half of the run (memory must depend on the number of sites, not of captures).
#
#   bash bench/growth-vs-pprof.sh [CAPTURES]        (HEAPWATCH=PATH measures another build)
#          (default 1000; the run is kept in
#                                                    target/bench-growth/run for reuse)
set -euo pipefail
cd "$(dirname "$0")/.."
CAPTURES=${1:-1000}
WORK=target/bench-growth
RUN=$WORK/run
mkdir -p "$WORK"

if [ -z "${HEAPWATCH:-}" ]; then cargo build --release --quiet; fi
HW=${HEAPWATCH:-$PWD/target/release/heapwatch}
command -v /usr/bin/time >/dev/null || { apt-get install -y -qq time >/dev/null; }


# Stored heap captures: a failed attempt (a loaded target missing its timeout) is no capture.
stored() { grep '"kind":"heap"' "$RUN/manifest.jsonl" 2>/dev/null | grep '"error":null' | grep -c '"dup_of":null' || true; }
if [ "$(stored)" -lt "$CAPTURES" ]; then
    # A run cut short (a loaded machine can make the target miss its timeouts) is resumed.
    (cd testdata/go && CGO_ENABLED=0 go build -trimpath -o "$PWD/../../$WORK/bigprofile" ./cmd/bigprofile)
    "$WORK/bigprofile" -listen 127.0.0.1:0 -stacks 25000 -churn 32MiB > "$WORK/target.out" &
    TARGET=$!
    trap 'kill $TARGET 2>/dev/null || true' EXIT
    for _ in $(seq 100); do grep -q listening "$WORK/target.out" 2>/dev/null && break; sleep 0.1; done
    ADDR=$(sed -n 's/^listening on //p' "$WORK/target.out" | head -1)
    # --gc makes every capture a fresh publication, so consecutive captures differ.
    while [ "$(stored)" -lt "$CAPTURES" ]; do
        "$HW" collect "http://$ADDR" --out "$RUN" --gc --interval 10ms --memstats-interval 0 --duration 20s --quiet || true
    done
    kill $TARGET; wait $TARGET 2>/dev/null || true
    trap - EXIT
fi

# Keep exactly the first CAPTURES distinct heap captures.
FULL=$WORK/full
rm -rf "$FULL" "$WORK/quarter" "$WORK/half"
mkdir -p "$FULL" "$WORK/quarter" "$WORK/half"
python3 - "$RUN" "$FULL" "$WORK/quarter" "$WORK/half" "$CAPTURES" <<'EOF'
import json, os, sys
run, full, quarter, half, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
recs = [json.loads(l) for l in open(os.path.join(run, "manifest.jsonl")) if l.strip()]
heap = [r for r in recs if r["kind"] == "heap" and r.get("error") is None and r.get("dup_of") is None][:n]
for dest, part in ((full, heap), (quarter, heap[: n // 4]), (half, heap[: n // 2])):
    os.makedirs(os.path.join(dest, "profiles"), exist_ok=True)
    with open(os.path.join(dest, "manifest.jsonl"), "w") as m:
        for r in part:
            m.write(json.dumps(r) + "\n")
            src = os.path.abspath(os.path.join(run, r["file"]))
            os.symlink(src, os.path.join(dest, r["file"]))
    with open(os.path.join(dest, "pairs.txt"), "w") as p:
        for a, b in zip(part, part[1:]):
            p.write(os.path.abspath(os.path.join(run, a["file"])) + " " + os.path.abspath(os.path.join(run, b["file"])) + "\n")
EOF
# RECORD_ONLY=1: stop here, the run and its copies ready (bench/growth-index.sh uses them).
if [ -n "${RECORD_ONLY:-}" ]; then exit 0; fi
COUNT=$(wc -l < "$FULL/manifest.jsonl")
MEAN_KB=$(python3 -c "
import json,sys
r=[json.loads(l) for l in open('$FULL/manifest.jsonl')]
print(round(sum(x['bytes'] for x in r)/len(r)/1024))")

measure() { # label, command... → prints 'label wall_s rss_mib'
    local label=$1; shift
    /usr/bin/time -f '%e %M' -o "$WORK/time.txt" "$@" > /dev/null
    read -r wall rss < "$WORK/time.txt"
    printf '%s %s %s\n' "$label" "$wall" "$(( rss / 1024 ))"
}

echo "captures: $COUNT distinct heap profiles, mean $MEAN_KB KB gzipped; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
# Each growth twice: first with no site index (every profile decoded, sites.idx written), then
# reading it. The collector writes the index as it records, so the second is what a run
# recorded by this build costs.
for i in 1 2 3; do
    for part in quarter half full; do
        dir=$WORK/$part
        [ "$part" = full ] && dir=$FULL
        rm -f "$dir/sites.idx"
        measure "growth($part, no index)" "$HW" growth "$dir" --json
        measure "growth($part, index)" "$HW" growth "$dir" --json
    done
done

# pprof over consecutive pairs: time a sample of 40 pairs and scale to all of them.
go tool pprof -top "$(head -1 "$FULL/pairs.txt" | cut -d' ' -f2)" > /dev/null 2>&1 || true
PAIRS=$(wc -l < "$FULL/pairs.txt")
START=$(date +%s.%N)
head -40 "$FULL/pairs.txt" | while read -r a b; do
    go tool pprof -top -diff_base "$a" "$b" > /dev/null 2>&1
done
END=$(date +%s.%N)
python3 -c "
per = ($END - $START) / 40
print(f'pprof -diff_base: {per:.3f} s per pair, x {$PAIRS} pairs = {per * $PAIRS:.1f} s (extrapolated from 40 pairs)')"
