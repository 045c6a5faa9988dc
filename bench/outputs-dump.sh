#!/usr/bin/env bash
# Dumps every analysis output (growth, compare, check, report, flame, triage) on every recorded run
# in testdata/ into one folder, so that a refactor can be checked byte for byte:
#   bench/outputs-dump.sh target/debug/heapwatch /tmp/before
#   ... change ...
#   bench/outputs-dump.sh target/debug/heapwatch /tmp/after && diff -r /tmp/before /tmp/after
# Runs are copied to a fixed scratch path first (an analysis may write the run's index), so paths
# printed in outputs are the same on both sides. Exit codes are recorded with each output.
set -u
bin=$(realpath "${1:?usage: outputs-dump.sh HEAPWATCH OUT_DIR}")
out=${2:?usage: outputs-dump.sh HEAPWATCH OUT_DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
scratch=/tmp/heapwatch-outputs-dump
# One dump at a time on this machine: two would share the scratch path (another worktree's
# dump waits here until this one is done).
exec 9>"$scratch.lock"
flock 9
rm -rf "$scratch" "$out"
mkdir -p "$scratch" "$out"
cp -r "$repo/testdata/runs" "$scratch/runs"
runs=$(cd "$scratch/runs" && ls -d */ | tr -d /)

# run NAME CMD...: stdout, stderr and exit code of one call
run() {
  local name=$1; shift
  (cd "$scratch" && "$@" >"$out/$name.out" 2>"$out/$name.err"; echo $? >"$out/$name.rc")
}

for r in $runs; do
  R=runs/$r
  run "growth-$r" "$bin" growth "$R"
  run "growth-$r-json" "$bin" growth "$R" --json
  run "growth-$r-n3" "$bin" growth "$R" -n 3
  run "check-$r" "$bin" check "$R" --fail-on 'growth>1MiB/s'
  run "check-$r-ttl" "$bin" check "$R" --fail-on 'time-to-limit<60s'
  run "report-$r" "$bin" report "$R" --out "$scratch/report-$r"
  run "flame-$r-growth" "$bin" flame "$R" --growth -o "$scratch/flame-$r-growth.svg"
  run "flame-$r" "$bin" flame "$R" -o "$scratch/flame-$r.svg"
  for b in $runs; do
    [ "$r" = "$b" ] && continue
    run "compare-$r-$b" "$bin" compare "$R" "runs/$b"
    run "compare-$r-$b-json" "$bin" compare "$R" "runs/$b" --json
  done
done
B=runs/controller-2.0.2
N=runs/controller-2.1.0
run "check-regression" "$bin" check "$N" --baseline "$B" --fail-on 'regression>1MiB/s'
run "report-baseline" "$bin" report "$N" --baseline "$B" --out "$scratch/report-baseline"
run "flame-runs-diff" "$bin" flame "$N" --diff "$B" -o "$scratch/flame-runs-diff.svg"
for p in "$repo"/testdata/k8s/*.json; do
  n=$(basename "$p" .json)
  run "triage-$n" "$bin" triage "$p" --at 2026-01-01T00:00:00Z
  run "triage-$n-json" "$bin" triage "$p" --at 2026-01-01T00:00:00Z --json
  run "triage-$n-events" "$bin" triage "$p" --events "$repo/testdata/k8s/events-liveness-killing.json" --at 2026-01-01T00:00:00Z
  run "report-oomgrow-pod-$n" "$bin" report runs/oomgrow --pod "$p" --at 2026-01-01T00:00:00Z --out "$scratch/report-oomgrow-pod-$n"
done
# bad input: the error words are outputs too
mkdir -p "$scratch/bad/empty" && echo 'not json' >"$scratch/bad/run.json.txt"
mkdir -p "$scratch/bad/brokenrun" && echo '{' >"$scratch/bad/brokenrun/run.json"
cp -r runs/oomgrow "$scratch/bad/nomanifest" 2>/dev/null || cp -r "$scratch/runs/oomgrow" "$scratch/bad/nomanifest"
rm -f "$scratch/bad/nomanifest/manifest.jsonl"
for c in growth check report flame; do
  for d in /nonexistent bad/empty bad/brokenrun bad/nomanifest bad/run.json.txt; do
    n=$(echo "$d" | tr / _)
    case $c in
      growth) run "bad-$c$n" "$bin" growth "$d" ;;
      check) run "bad-$c$n" "$bin" check "$d" --fail-on 'growth>1MiB/s' ;;
      report) run "bad-$c$n" "$bin" report "$d" --out "$scratch/bad-report$n" ;;
      flame) run "bad-$c$n" "$bin" flame "$d" --growth -o "$scratch/bad-flame$n.svg" ;;
    esac
  done
done
run "bad-compare" "$bin" compare runs/oomgrow /nonexistent
run "bad-limit" "$bin" growth runs/oomgrow --limit 12parsecs
run "bad-at" "$bin" triage "$repo/testdata/k8s/pod-oomkilled.json" --at yesterday
run "bad-report-out" "$bin" report runs/oomgrow --out /proc/version/x
for d in "$scratch"/report-*; do
  [ -d "$d" ] && cp -r "$d" "$out/$(basename "$d").dir"
done
cp "$scratch"/flame-*.svg "$out/" 2>/dev/null
echo "$(ls "$out" | wc -l) outputs in $out"
