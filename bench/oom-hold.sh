#!/usr/bin/env bash
# The last capture before each OOM kill, with and without `run --oom-hold`, side by side in
# one run: testdata/go/cmd/replay keeps 40 MiB/s in a 128 MiB v1 memory cgroup, five kills per
# setting. Prints, per setting, each kill's age of the newest good heap capture (ms between
# its start and the kill seen), how long the kernel held the process, and the capture's in-use
# heap, and in-use plus recent_space (allocated, not yet published), against the cgroup's
# anonymous memory at the kill (the largest detailed memory.jsonl sample of the cycle).
# Needs root (a memory cgroup) and Go.
#
#   bash bench/oom-hold.sh [HEAPWATCH_BIN]
set -euo pipefail
HW=${1:-target/release/heapwatch}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
(cd testdata/go && CGO_ENABLED=0 go build -trimpath -o "$W/replay" ./cmd/replay)
echo "date $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) $("$HW" --version)"
for hold in 0s 2s; do
    "$HW" run -q --limit 128MiB --restarts 4 --interval 1s --oom-hold "$hold" \
        --out "$W/hold-$hold" -- "$W/replay" -rate 40MiB >/dev/null 2>&1 || true
    python3 - "$W/hold-$hold" "$hold" <<'PY'
import json, sys
run, hold = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(run + "/manifest.jsonl")]
mem = [json.loads(l) for l in open(run + "/memory.jsonl")]
for e in (r for r in recs if r["kind"] == "exit"):
    c = e["incarnation"]
    heaps = [r for r in recs if r["kind"] == "heap" and r["incarnation"] == c and not r.get("error")]
    last = max(heaps, key=lambda r: r["t_ms"])
    anon = max((m["cgroup"]["anon"] for m in mem
                if "cgroup" in m and m["t_ms"] <= e["t_ms"] and m.get("alive")), default=0)
    inuse = last["totals"].get("inuse_space", 0)
    recent = last["totals"].get("recent_space", 0)
    print(f"oom-hold {hold} cycle {c}: age {e['t_ms'] - last['t_ms']} ms, "
          f"held {e['totals'].get('oom_held_ms', 0)} ms, in-use {inuse / 2**20:.1f} MiB "
          f"+ recent {recent / 2**20:.1f} MiB of {anon / 2**20:.1f} MiB anonymous "
          f"({100 * inuse / max(anon, 1):.0f} % / {100 * (inuse + recent) / max(anon, 1):.0f} %)")
PY
done
