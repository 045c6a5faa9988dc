#!/usr/bin/env bash
# The report's explorer on runs of 1,000 stored heap captures: what index.html weighs and
# carries, what `report` costs (beside `growth --json` of the same run, and beside BEFORE's
# `report` when BEFORE=OLD_BINARY is given: the page without the explorer), and how long
# headless Chromium takes to open the page (load event, explorer drawn) and to draw the view
# of a whole life (every capture replayed, flamegraph and site table drawn).
#
#   service  hiddenleak (96 MiB held, a 1 MiB/s leak, 128 MiB/s churn), collected with --gc
#            every 50 ms (a fresh publication per capture, so no two are the same) until
#            1,000 heap captures are stored: a service's few dozen stacks
#   big      the 1,000 captures of bench/growth-vs-pprof.sh (bigprofile, 25,000 stacks,
#            ~200 KB each; recorded there first, or made by CYCLE=1 bench/growth-index.sh):
#            a worst case, past the page's budget
#
#   bash bench/report-explorer.sh [service|big|both]     (default service; HEAPWATCH=PATH,
#                                                          BEFORE=PATH, ROUNDS=N, OPENS=N)
set -euo pipefail
cd "$(dirname "$0")/.."
WHICH=${1:-service}
ROUNDS=${ROUNDS:-3}
OPENS=${OPENS:-5}
WORK=target/bench-explorer
mkdir -p "$WORK"
if [ -z "${HEAPWATCH:-}" ]; then cargo build --release --quiet; fi
HW=${HEAPWATCH:-$PWD/target/release/heapwatch}
command -v /usr/bin/time >/dev/null || { apt-get install -y -qq time >/dev/null; }

stored() { grep '"kind":"heap"' "$1/manifest.jsonl" 2>/dev/null | grep '"error":null' | grep -c '"dup_of":null' || true; }

# Exactly the first N stored heap captures of a run, as a run of its own (profiles linked).
first_n() { # run, dest, n
    rm -rf "$2"
    python3 - "$1" "$2" "$3" <<'PY'
import json, os, shutil, sys
run, dest, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
recs = [json.loads(l) for l in open(os.path.join(run, "manifest.jsonl")) if l.strip()]
kept, heaps = [], 0
for r in recs:
    if heaps == n:
        break
    kept.append(r)
    if r["kind"] == "heap" and r.get("error") is None and r.get("dup_of") is None:
        heaps += 1
os.makedirs(os.path.join(dest, "profiles"))
with open(os.path.join(dest, "manifest.jsonl"), "w") as m:
    for r in kept:
        m.write(json.dumps(r, separators=(",", ":")) + "\n")
        if r.get("file"):
            os.symlink(os.path.abspath(os.path.join(run, r["file"])), os.path.join(dest, r["file"]))
for f in ("run.json", "memory.jsonl"):
    if os.path.exists(os.path.join(run, f)):
        shutil.copy(os.path.join(run, f), dest)
print(f"{heaps} stored heap captures of {run}")
PY
}

record_service() {
    local run=$WORK/service-recorded
    if [ "$(stored "$run")" -lt 1000 ]; then
        (cd testdata/go && CGO_ENABLED=0 go build -trimpath -o "$PWD/../../$WORK/hiddenleak" ./cmd/hiddenleak)
        "$WORK/hiddenleak" -listen 127.0.0.1:0 > "$WORK/target.out" &
        local target=$!
        trap "kill $target 2>/dev/null || true" EXIT
        for _ in $(seq 100); do grep -q listening "$WORK/target.out" 2>/dev/null && break; sleep 0.1; done
        local addr
        addr=$(sed -n 's/^listening on //p' "$WORK/target.out" | head -1)
        while [ "$(stored "$run")" -lt 1000 ]; do
            "$HW" collect "http://$addr" --out "$run" --gc --interval 50ms --profiles heap \
                --memstats-interval 0 --pid "$target" --duration 90s --quiet || true
        done
        kill "$target"; wait "$target" 2>/dev/null || true
        trap - EXIT
    fi
    first_n "$run" "$WORK/service" 1000
}

record_big() {
    if [ "$(stored target/bench-growth/full)" -lt 1000 ]; then
        RECORD_ONLY=1 bash bench/growth-vs-pprof.sh 1000
    fi
    first_n target/bench-growth/full "$WORK/big" 1000
}

measure() { # label, command... → 'label wall cpu rss_mib'
    local label=$1; shift
    /usr/bin/time -f '%e %U %S %M' -o "$WORK/time.txt" "$@" > /dev/null 2>&1 || true
    read -r wall user sys rss < "$WORK/time.txt"
    python3 -c "print('$label', $wall, round($user + $sys, 2), $rss // 1024)"
}

page_facts() { # report dir → size, data block, carried
    python3 - "$1/index.html" <<'PY'
import json, re, sys
html = open(sys.argv[1]).read()
m = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', html, re.S)
print(f"index.html {len(html.encode())} bytes", end="")
if m:
    d = json.loads(m.group(1))
    caps = sum(len(l["captures"]) for l in d["lives"])
    pairs = sum(len(c["d"]) // 2 for l in d["lives"] for c in l["captures"])
    print(f"; data block {len(m.group(1).encode())} bytes: {len(d['frames'])} frames, "
          f"{len(d['stacks'])} stacks, {caps} captures carried, {pairs} (stack, bytes) pairs")
    note = re.search(r'this page carries (\d+) of the run.s (\d+) stored heap captures: every (\w+)', html)
    if note:
        print("  the page says: carries", note.group(1), "of", note.group(2), "every", note.group(3))
else:
    print("; no explorer")
PY
}

bench_run() { # name
    local run=$WORK/$1
    echo "== $1: $(stored "$run") stored heap captures, $(du -shL "$run/profiles" | cut -f1) of profiles; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$HW" index "$run" > /dev/null
    for round in $(seq "$ROUNDS"); do
        echo "round $round; load $(cut -d' ' -f1-3 /proc/loadavg)"
        measure growth "$HW" growth "$run" --json
        measure report "$HW" report "$run" -o "$WORK/$1-report"
        if [ -n "${BEFORE:-}" ]; then
            measure report-before "$BEFORE" report "$run" -o "$WORK/$1-report-before"
        fi
    done
    page_facts "$WORK/$1-report"
    echo "open (ms, $OPENS opens, a fresh tab each; load $(cut -d' ' -f1-3 /proc/loadavg)):"
    python3 bench/chromium_cdp.py open "file://$PWD/$WORK/$1-report/index.html" --runs "$OPENS"
    if [ -n "${BEFORE:-}" ]; then
        page_facts "$WORK/$1-report-before"
        echo "open the page before the explorer (ms):"
        python3 bench/chromium_cdp.py open "file://$PWD/$WORK/$1-report-before/index.html" --runs "$OPENS"
    fi
}

case $WHICH in
    service) record_service; bench_run service ;;
    big) record_big; bench_run big ;;
    both) record_service; record_big; bench_run service; bench_run big ;;
    *) echo "usage: $0 [service|big|both]" >&2; exit 2 ;;
esac
