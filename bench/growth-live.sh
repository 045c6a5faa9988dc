#!/usr/bin/env bash
# `growth` on a run as the collector leaves it: CAPTURES real captures of ~276 KB recorded by
# the real collector from a live Go target (bigprofile -stacks 25000 -churn 32MiB, --gc so
# every capture is distinct, --max-duty 1 so recording takes minutes), once by each build,
# each run keeping the site index (sites.idx) its collector wrote live. Then, side by side in
# each of ROUNDS rounds, per recorded run:
#   covered          captures the live index has a fresh entry for, against stored captures
#                    (and `growth --json` from it compared with growth from decoding)
#   gzip-dc          `gzip -dc` over the same profiles: the decode floor (one core)
#   growth-live      `growth --json` on the run with the index as the collector left it
#   growth-rebuild   `growth --json` with the index removed (decodes all, writes the index)
#   growth-second    `growth --json` again
#   index-250/500/1000  `growth --json` from a fresh index over the first quarter, half and
#                    all of the captures (peak RSS must follow the sites, not the captures)
# Prints label, wall s, CPU s (user+sys) and peak RSS MiB per measurement, then medians,
# ranges and per-round ratios. The machine is shared: compare ratios within a round.
#
#   BEFORE=/work/bin/heapwatch-02739a5 ROUNDS=3 bash bench/growth-live.sh [CAPTURES]
#   (HEAPWATCH=PATH: the AFTER build, default this tree's release build; runs are kept in
#    target/bench-growth/live/run-{before,after} and reused; RERECORD=1 records them again)
set -euo pipefail
cd "$(dirname "$0")/.."
CAPTURES=${1:-1000}
ROUNDS=${ROUNDS:-3}
WORK=target/bench-growth/live
AFTER=${HEAPWATCH:-$PWD/target/release/heapwatch}
BEFORE=${BEFORE:-}
[ -n "${HEAPWATCH:-}" ] || [ "${RECORD_ONLY:-}" = before ] || cargo build --release --quiet
command -v /usr/bin/time >/dev/null || apt-get install -y -qq time >/dev/null
mkdir -p "$WORK"
load() { cut -d' ' -f1-3 /proc/loadavg; }

# Stored heap captures of a run: a failed attempt or a duplicate is no capture.
stored() {
    grep '"kind":"heap"' "$1/manifest.jsonl" 2>/dev/null | grep '"error":null' | grep -c '"dup_of":null' || true
}

TARGET=
start_target() {
    [ -n "$TARGET" ] && return
    (cd testdata/go && CGO_ENABLED=0 go build -trimpath -o "$PWD/../../$WORK/bigprofile" ./cmd/bigprofile)
    "$WORK/bigprofile" -listen 127.0.0.1:0 -stacks 25000 -churn 32MiB > "$WORK/target.out" &
    TARGET=$!
    trap 'kill $TARGET 2>/dev/null || true' EXIT
    for _ in $(seq 100); do grep -q listening "$WORK/target.out" 2>/dev/null && break; sleep 0.1; done
    ADDR=$(sed -n 's/^listening on //p' "$WORK/target.out" | head -1)
}

record() { # label binary: one collect until CAPTURES are stored, then Ctrl-C (as a user stops it)
    local run=$WORK/run-$1
    if [ -z "${RERECORD:-}" ] && [ "$(stored "$run")" -ge "$CAPTURES" ] && [ -f "$WORK/live-$1.idx" ]; then
        return
    fi
    start_target
    rm -rf "$run"
    local began=$SECONDS
    echo "recording $1 ($2): load $(load)"
    /usr/bin/time -f '%e %U %S %M' -o "$WORK/record-$1.time" "$2" collect "http://$ADDR" --out "$run" \
        --gc --interval 10ms --max-duty 1 --idle-backoff 1 --memstats-interval 0 --quiet &
    local timer=$!
    local collector=
    for _ in $(seq 50); do collector=$(pgrep -P "$timer" || true); [ -n "$collector" ] && break; sleep 0.1; done
    while [ "$(stored "$run")" -lt "$CAPTURES" ]; do sleep 1; done
    kill -INT "$collector"
    wait "$timer" || true
    # The index exactly as the collector left it, restored before each measurement of it.
    cp "$run/sites.idx" "$WORK/live-$1.idx"
    read -r wall user sys rss < "$WORK/record-$1.time"
    echo "recorded $1: $(stored "$run") stored captures in ${wall}s (collector CPU $(python3 -c "print(round($user + $sys, 1))") s, peak RSS $((rss / 1024)) MiB); load $(load)" \
        | tee "$WORK/record-$1.txt"
}

views() { # label: the first CAPTURES stored captures (and a quarter, a half) as runs of symlinks
    python3 - "$WORK/run-$1" "$WORK/$1" "$CAPTURES" <<'PY'
import json, os, shutil, sys
run, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
recs = [json.loads(l) for l in open(os.path.join(run, "manifest.jsonl")) if l.strip()]
heap = [r for r in recs if r["kind"] == "heap" and r.get("error") is None and r.get("dup_of") is None][:n]
for name, part in (("full", heap), ("q250", heap[: n // 4]), ("q500", heap[: n // 2])):
    dest = os.path.join(out, name)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(os.path.join(dest, "profiles"))
    with open(os.path.join(dest, "manifest.jsonl"), "w") as m:
        for r in part:
            m.write(json.dumps(r) + "\n")
            os.symlink(os.path.abspath(os.path.join(run, r["file"])), os.path.join(dest, r["file"]))
PY
}

LABELS=()
if [ -n "$BEFORE" ]; then LABELS+=(before); record before "$BEFORE"; fi
# RECORD_ONLY=before: record BEFORE's run only (e.g. while AFTER is still being built).
[ "${RECORD_ONLY:-}" = before ] && exit 0
LABELS+=(after); record after "$AFTER"
[ -z "$TARGET" ] || { kill "$TARGET"; wait "$TARGET" 2>/dev/null || true; trap - EXIT; }
binary() { if [ "$1" = before ]; then echo "$BEFORE"; else echo "$AFTER"; fi; }

for label in "${LABELS[@]}"; do
    views "$label"
    full=$WORK/$label/full
    cp "$WORK/live-$label.idx" "$full/sites.idx"
    # `index` finds every entry the live index has fresh and builds the rest.
    "$AFTER" index "$full" --json > "$WORK/covered-$label.json"
    python3 - "$WORK/covered-$label.json" "$label" "$WORK/run-$label/manifest.jsonl" <<'PY' | tee "$WORK/covered-$label.txt"
import json, sys
done, label, manifest = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
recs = [json.loads(l) for l in open(manifest) if l.strip()]
stored = [r for r in recs if r["kind"] == "heap" and r.get("error") is None and r.get("dup_of") is None]
print(f"{label}: the live index covers {done['fresh']} of {done['captures']} captures "
      f"({done['rebuilt']} left out; the whole run stored {len(stored)})")
PY
    # What growth says from the live index must be what it says from decoding every profile.
    cp "$WORK/live-$label.idx" "$full/sites.idx"
    "$(binary "$label")" growth "$full" --json > "$WORK/growth-live-$label.json"
    rm "$full/sites.idx"
    "$(binary "$label")" growth "$full" --json > "$WORK/growth-decoded-$label.json"
    if cmp -s "$WORK/growth-live-$label.json" "$WORK/growth-decoded-$label.json"; then
        echo "$label: growth --json from the live index is byte-identical to growth from decoding"
    else
        echo "$label: growth --json from the live index DIFFERS from growth from decoding"
    fi
    # The quarter and the half get an index of their own captures, built once.
    for part in q250 q500; do "$(binary "$label")" index "$WORK/$label/$part" > /dev/null; done
done

TIMES=$WORK/times.txt
: > "$TIMES"
measure() { # label, command... → appends 'label wall cpu rss_mib'
    local label=$1; shift
    /usr/bin/time -f '%e %U %S %M' -o "$WORK/time.txt" "$@" > /dev/null 2>&1
    read -r wall user sys rss < "$WORK/time.txt"
    python3 -c "print('$label', $wall, round($user + $sys, 2), $rss // 1024)" | tee -a "$TIMES"
}

echo "$CAPTURES captures a run, $(du -shL "$WORK/after/full/profiles" | cut -f1) gzipped; $(nproc) cores; load $(load)"
for round in $(seq "$ROUNDS"); do
    echo "round $round; load $(load)"
    for label in "${LABELS[@]}"; do
        hw=$(binary "$label")
        dir=$WORK/$label
        measure "gzip-dc/$label" sh -c "gzip -dc $dir/full/profiles/* > /dev/null"
        cp "$WORK/live-$label.idx" "$dir/full/sites.idx"
        measure "growth-live/$label" "$hw" growth "$dir/full" --json
        rm -f "$dir/full/sites.idx"
        measure "growth-rebuild/$label" "$hw" growth "$dir/full" --json
        measure "growth-second/$label" "$hw" growth "$dir/full" --json
        for part in q250 q500 full; do
            measure "index-${part#q}/$label" "$hw" growth "$dir/$part" --json
        done
    done
    echo "load after round $round: $(load)"
done
python3 - "$TIMES" <<'PY'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    label, wall, cpu, rss = line.split()
    rows.setdefault(label, []).append((float(wall), float(cpu), int(rss)))
print(f"{'':22} {'wall s (median, range)':>26} {'CPU s (median, range)':>26} {'peak RSS MiB':>14}")
for label, r in rows.items():
    w, c, m = zip(*r)
    print(f"{label:22} {st.median(w):8.2f} ({min(w):.2f}-{max(w):.2f}) {st.median(c):12.2f} ({min(c):.2f}-{max(c):.2f}) {min(m):>6}-{max(m)}")
def ratio(a, b, i):
    return [x[i] / y[i] for x, y in zip(rows.get(a, []), rows.get(b, [])) if y[i] > 0]
for label in sorted({k.split("/")[1] for k in rows}):
    for a, b in (("growth-live", "gzip-dc"), ("growth-rebuild", "gzip-dc"),
                 ("growth-rebuild", "growth-second"), ("growth-live", "growth-second")):
        for i, what in ((0, "wall"), (1, "CPU")):
            r = ratio(f"{a}/{label}", f"{b}/{label}", i)
            if r:
                print(f"{label}: {a} / {b} ({what}): {st.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}) per round")
PY
