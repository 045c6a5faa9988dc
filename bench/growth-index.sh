#!/usr/bin/env bash
# The site index (sites.idx) over the 1,000-capture run of bench/growth-vs-pprof.sh, side by
# side in one run, ROUNDS rounds:
#   gzip-dc          `gzip -dc` over the same profiles: the decode floor (one core)
#   growth-first     `growth --json` with no index: every profile decoded, the index written
#   growth-second    `growth --json` again: the index read, nothing decoded
#   index-rebuild    `heapwatch index` with no index (what growth-first adds to the decode)
#   quarter-*, half-*  the same two growth runs over the first quarter and half of the
#                    captures (memory must follow the sites, not the captures)
#   report-baseline  `report RUN --baseline QUARTER` (index warm)
#   growth+flames    growth of both runs + `flame --growth` + `flame --diff`: what the report
#                    computes, as separate commands (index warm)
# Prints label, wall s, CPU s (user+sys) and peak RSS MiB per measurement, then medians and
# ranges. The machine is shared: compare CPU time and ratios within a round.
#
#   bash bench/growth-index.sh [CAPTURES]        (HEAPWATCH=PATH measures another build;
#                                                 CYCLE=1 reuses fewer recorded captures)
set -euo pipefail
cd "$(dirname "$0")/.."
CAPTURES=${1:-1000}
ROUNDS=${ROUNDS:-3}
WORK=target/bench-growth
HW=${HEAPWATCH:-$PWD/target/release/heapwatch}
FULL=$WORK/full
QUARTER=$WORK/quarter
HALF=$WORK/half
if [ -n "${CYCLE:-}" ]; then
    # CYCLE=1: make the CAPTURES from however many distinct captures target/bench-growth/run
    # holds, each used in turn under a new seq and time (a loaded machine can make recording
    # 1,000 take the better part of an hour). Same files, sizes and sites; the profiles repeat.
    [ -n "${HEAPWATCH:-}" ] || cargo build --release --quiet
    rm -rf "$FULL" "$QUARTER" "$HALF"
    python3 - "$WORK/run" "$FULL" "$QUARTER" "$HALF" "$CAPTURES" <<'PY'
import json, os, sys
run, full, quarter, half, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
recs = [json.loads(l) for l in open(os.path.join(run, "manifest.jsonl")) if l.strip()]
heap = [r for r in recs if r["kind"] == "heap" and r.get("error") is None and r.get("dup_of") is None]
t0 = heap[0]["t_ms"]
made = []
for i in range(n):
    r = dict(heap[i % len(heap)])
    src = os.path.abspath(os.path.join(run, r["file"]))
    r.update(seq=i + 1, incarnation=1, t_ms=t0 + 1000 * i, file=f"profiles/{i + 1:06}-heap.pb.gz")
    made.append((r, src))
for dest, part in ((full, made), (quarter, made[: n // 4]), (half, made[: n // 2])):
    os.makedirs(os.path.join(dest, "profiles"), exist_ok=True)
    with open(os.path.join(dest, "manifest.jsonl"), "w") as m:
        for r, src in part:
            m.write(json.dumps(r) + "\n")
            os.symlink(src, os.path.join(dest, r["file"]))
print(f"{n} captures cycled from {len(heap)} recorded")
PY
else
    RECORD_ONLY=1 bash bench/growth-vs-pprof.sh "$CAPTURES"
fi
TIMES=$WORK/index-times.txt
: > "$TIMES"

measure() { # label, command... → appends 'label wall cpu rss_mib'
    local label=$1; shift
    /usr/bin/time -f '%e %U %S %M' -o "$WORK/time.txt" "$@" > /dev/null 2>&1
    read -r wall user sys rss < "$WORK/time.txt"
    python3 -c "print('$label', $wall, round($user + $sys, 2), $rss // 1024)" | tee -a "$TIMES"
}

echo "$(wc -l < "$FULL/manifest.jsonl") captures, $(du -shL "$FULL/profiles" | cut -f1) gzipped; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
    echo "round $round; load $(cut -d' ' -f1-3 /proc/loadavg)"
    measure gzip-dc sh -c "gzip -dc $FULL/profiles/* > /dev/null"
    rm -f "$FULL/sites.idx"
    measure growth-first "$HW" growth "$FULL" --json
    measure growth-second "$HW" growth "$FULL" --json
    ls -la "$FULL/sites.idx" | awk '{print "sites.idx bytes", $5}'
    rm -f "$FULL/sites.idx"
    measure index-rebuild "$HW" index "$FULL"
    rm -f "$QUARTER/sites.idx" "$HALF/sites.idx"
    measure quarter-first "$HW" growth "$QUARTER" --json
    measure quarter-second "$HW" growth "$QUARTER" --json
    measure half-first "$HW" growth "$HALF" --json
    measure half-second "$HW" growth "$HALF" --json
    measure report-baseline "$HW" report "$FULL" --baseline "$QUARTER" -o "$WORK/report"
    measure growth+flames sh -c "'$HW' growth '$FULL' --json && '$HW' growth '$QUARTER' --json \
        && '$HW' flame '$FULL' --growth -o '$WORK/growth.svg' \
        && '$HW' flame '$FULL' --diff '$QUARTER' -o '$WORK/diff.svg'"
done
python3 - "$TIMES" <<'PY'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    label, wall, cpu, rss = line.split()
    rows.setdefault(label, []).append((float(wall), float(cpu), int(rss)))
print(f"{'':16} {'wall s (median, range)':>26} {'CPU s (median, range)':>26} {'peak RSS MiB':>14}")
for label, r in rows.items():
    w, c, m = zip(*r)
    print(f"{label:16} {st.median(w):8.2f} ({min(w):.2f}-{max(w):.2f}) {st.median(c):12.2f} ({min(c):.2f}-{max(c):.2f}) {min(m):>6}-{max(m)}")
def ratio(a, b, i):
    return [x[i] / y[i] for x, y in zip(rows[a], rows[b]) if y[i] > 0]
for a, b in (("growth-first", "growth-second"), ("growth-first", "gzip-dc"),
             ("index-rebuild", "gzip-dc"),
             ("growth-second", "gzip-dc"), ("report-baseline", "growth+flames")):
    for i, what in ((0, "wall"), (1, "CPU")):
        r = ratio(a, b, i)
        if r:
            print(f"{a} / {b} ({what}): {st.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}) per round")
PY
