#!/usr/bin/env bash
# Whole-command benchmark: `heapwatch top` against `go tool pprof -top` and against plain
# `gzip -dc` (the floor: no tool can decode a gzipped profile faster than it can be gunzipped)
# on one large real heap profile. Prints hyperfine's tables, the ratios, and peak RSS.
#
# Usage: bench/top-vs-pprof.sh [PROFILE]
#   PROFILE  a gzipped heap profile; default /tmp/big.pb.gz, made by
#            testdata/go/cmd/bigprofile when missing (STACKS distinct stacks, default 150000).
# Environment: STACKS (stacks of a generated profile), RUNS (hyperfine runs, default 20),
#   PPROF_RUNS (runs for the two pprof commands, default 5), ROUNDS (interleaved rounds,
#   default 40), PPROF_ROUNDS (of which with pprof, default 5), OUT (result folder,
#   default target/bench), NO_HYPERFINE=1 (use the plain bash loop even if hyperfine is here),
#   BASELINE (another heapwatch binary, e.g. one built from an earlier commit, timed in the
#   same run so a before/after comparison shares the machine's load).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
profile=${1:-/tmp/big.pb.gz}
stacks=${STACKS:-150000}
runs=${RUNS:-20}
pprof_runs=${PPROF_RUNS:-5}
rounds=${ROUNDS:-40}
pprof_rounds=${PPROF_ROUNDS:-5}
out=${OUT:-$root/target/bench}
baseline=${BASELINE:-}
mkdir -p "$out"

need() {
    command -v "$1" >/dev/null 2>&1
}

echo "== building heapwatch (release)" >&2
(cd "$root" && cargo build --release --quiet --bin heapwatch)
heapwatch=${CARGO_TARGET_DIR:-$root/target}/release/heapwatch

if [[ ! -s $profile ]]; then
    echo "== generating $profile ($stacks stacks, MemProfileRate=1)" >&2
    (cd "$root/testdata/go" && go run ./cmd/bigprofile -stacks "$stacks" -o "$profile")
fi

# `go tool pprof` builds pprof on first use and caches it: one run first so that build is not
# timed. `go tool -n pprof` names the cached binary, which is timed too (without the go
# command's own start-up).
echo "== warming go tool pprof" >&2
go tool pprof -top "$profile" >/dev/null 2>&1
pprof_bin=$(go tool -n pprof)

raw_bytes=$(gzip -dc "$profile" | wc -c)
gz_bytes=$(wc -c <"$profile")

echo
echo "## Machine"
echo "date:    $(date -u +%Y-%m-%dT%H:%MZ)"
echo "nproc:   $(nproc)"
echo "cpu:     $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rustc:   $(rustc --version)"
echo "go:      $(go version)"
echo "profile: $profile ($gz_bytes bytes gzipped, $raw_bytes bytes of protobuf)"
[[ -n $baseline ]] && echo "baseline: $baseline"

hw_cmd="$heapwatch top $profile"
gz_cmd="gzip -dc $profile"
gotool_cmd="go tool pprof -top $profile"
pprof_cmd="$pprof_bin -top $profile"

# Mean wall seconds and mean CPU (user+system) seconds of each command. On a busy machine
# the CPU figure is the steadier one: a process waiting for a core adds wall time only.
declare -A mean cpu

if [[ -z ${NO_HYPERFINE:-} ]] && need hyperfine && need python3; then
    echo
    echo "## Time (hyperfine)"
    base_args=()
    [[ -n $baseline ]] && base_args=(-n "heapwatch top (baseline)" "$baseline top $profile")
    hyperfine --warmup 3 --runs "$runs" --style basic --output null \
        --export-json "$out/top-fast.json" --export-markdown "$out/top-fast.md" \
        -n "heapwatch top" "$hw_cmd" \
        -n "gzip -dc (floor)" "$gz_cmd" "${base_args[@]}"
    hyperfine --warmup 1 --runs "$pprof_runs" --style basic --output null \
        --export-json "$out/top-pprof.json" --export-markdown "$out/top-pprof.md" \
        -n "pprof -top (cached binary)" "$pprof_cmd" \
        -n "go tool pprof -top" "$gotool_cmd"
    while read -r name wall used; do
        mean[$name]=$wall
        cpu[$name]=$used
    done < <(python3 - "$out/top-fast.json" "$out/top-pprof.json" "$baseline" <<'EOF'
import json, sys
keys = ["heapwatch", "gzip"] + (["baseline"] if sys.argv[3] else []) + ["pprof", "gotool"]
results = []
for path in sys.argv[1:3]:
    results += json.load(open(path))["results"]
for key, r in zip(keys, results):
    print(key, r["mean"], r["user"] + r["system"])
EOF
    )
else
    # No hyperfine: a plain loop, best of RUNS.
    echo
    echo "## Time (bash loop, best of N; no hyperfine: both ratio columns below use this)"
    best() {
        local n=$1 key=$2
        shift 2
        local min=
        for ((i = 0; i < n; i++)); do
            local t0 t1
            t0=$(date +%s%N)
            "$@" >/dev/null 2>&1
            t1=$(date +%s%N)
            local d=$((t1 - t0))
            if [[ -z $min || $d -lt $min ]]; then min=$d; fi
        done
        mean[$key]=$(awk -v ns="$min" 'BEGIN { printf "%.6f", ns / 1e9 }')
        cpu[$key]=${mean[$key]}
        printf '%-28s %8.1f ms\n' "$key" "$(awk -v ns="$min" 'BEGIN { print ns / 1e6 }')"
    }
    best "$runs" heapwatch "$heapwatch" top "$profile"
    best "$runs" gzip gzip -dc "$profile"
    [[ -n $baseline ]] && best "$runs" baseline "$baseline" top "$profile"
    best "$pprof_runs" pprof "$pprof_bin" -top "$profile"
    best "$pprof_runs" gotool go tool pprof -top "$profile"
fi

echo
echo "## Ratios (by mean wall time; by mean user+system CPU time)"
ratio() {
    awk -v a="$2" -v b="$3" -v c="$4" -v d="$5" -v label="$1" \
        'BEGIN { printf "%-32s %6.2fx   %6.2fx\n", label, a / b, c / d }'
}
ratio "pprof binary / heapwatch:" "${mean[pprof]}" "${mean[heapwatch]}" "${cpu[pprof]}" "${cpu[heapwatch]}"
ratio "go tool pprof / heapwatch:" "${mean[gotool]}" "${mean[heapwatch]}" "${cpu[gotool]}" "${cpu[heapwatch]}"
ratio "heapwatch / gzip -dc floor:" "${mean[heapwatch]}" "${mean[gzip]}" "${cpu[heapwatch]}" "${cpu[gzip]}"
if [[ -n $baseline ]]; then
    ratio "baseline / heapwatch:" "${mean[baseline]}" "${mean[heapwatch]}" "${cpu[baseline]}" "${cpu[heapwatch]}"
    ratio "pprof binary / baseline:" "${mean[pprof]}" "${mean[baseline]}" "${cpu[pprof]}" "${cpu[baseline]}"
    ratio "baseline / gzip -dc floor:" "${mean[baseline]}" "${mean[gzip]}" "${cpu[baseline]}" "${cpu[gzip]}"
fi

# Interleaved rounds: every command once per round, in turn, so all of them see the same
# load; on a shared machine the medians of these are the figures to compare. CPU is the
# child's user+system time from wait4 (all its threads).
if need python3; then
    echo
    echo "## Interleaved (ROUNDS=$rounds rounds; pprof in the first $pprof_rounds): median and min"
    python3 - "$rounds" "$pprof_rounds" "$heapwatch" "$profile" "$pprof_bin" "$baseline" <<'EOF_PY'
import os, statistics, sys, time
rounds, pprof_rounds = int(sys.argv[1]), int(sys.argv[2])
heapwatch, profile, pprof, baseline = sys.argv[3:7]
cmds = [("heapwatch top", [heapwatch, "top", profile]),
        ("gzip -dc", ["gzip", "-dc", profile])]
if baseline:
    cmds.append(("heapwatch top (baseline)", [baseline, "top", profile]))
cmds.append(("pprof -top (cached binary)", [pprof, "-top", profile]))
null = [(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]
wall = {n: [] for n, _ in cmds}
cpu = {n: [] for n, _ in cmds}
print("load at start:", open("/proc/loadavg").read().split()[:3])
for r in range(rounds):
    for name, argv in cmds:
        if name.startswith("pprof") and r >= pprof_rounds:
            continue
        t0 = time.perf_counter()
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=null)
        _, status, ru = os.wait4(pid, 0)
        wall[name].append(time.perf_counter() - t0)
        cpu[name].append(ru.ru_utime + ru.ru_stime)
        if status != 0:
            sys.exit(f"{name} failed: status {status}")
print("load at end:  ", open("/proc/loadavg").read().split()[:3])
med = lambda xs: statistics.median(xs)
for name, _ in cmds:
    print(f"{name:28s} wall {med(wall[name])*1e3:8.1f} ms (min {min(wall[name])*1e3:7.1f})"
          f"   cpu {med(cpu[name])*1e3:8.1f} ms (min {min(cpu[name])*1e3:7.1f})   n={len(wall[name])}")
def ratio(label, a, b):
    print(f"{label:32s} wall {med(wall[a])/med(wall[b]):6.2f}x (min/min {min(wall[a])/min(wall[b]):5.2f}x)"
          f"   cpu {med(cpu[a])/med(cpu[b]):6.2f}x")
ratio("heapwatch / gzip -dc:", "heapwatch top", "gzip -dc")
ratio("pprof binary / heapwatch:", "pprof -top (cached binary)", "heapwatch top")
if baseline:
    ratio("baseline / gzip -dc:", "heapwatch top (baseline)", "gzip -dc")
    ratio("baseline / heapwatch:", "heapwatch top (baseline)", "heapwatch top")
    ratio("pprof binary / baseline:", "pprof -top (cached binary)", "heapwatch top (baseline)")
EOF_PY
fi

echo
echo "## Peak memory (max RSS of 3 runs, KiB)"
peak() {
    local label=$1
    shift
    if [[ ! -x /usr/bin/time ]]; then
        echo "$label: /usr/bin/time not installed (apt-get install time)"
        return
    fi
    local all=()
    for _ in 1 2 3; do
        all+=("$(/usr/bin/time -f '%M' "$@" 2>&1 >/dev/null | tail -n1)")
    done
    printf '%-28s %s\n' "$label" "${all[*]}"
}
peak "heapwatch top" "$heapwatch" top "$profile"
[[ -n $baseline ]] && peak "heapwatch top (baseline)" "$baseline" top "$profile"
peak "pprof -top (cached binary)" "$pprof_bin" -top "$profile"
peak "gzip -dc" gzip -dc "$profile"
