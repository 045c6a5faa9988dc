#!/usr/bin/env bash
# Two heapwatch builds side by side in one run (BEFORE and AFTER, the order swapped every
# round so both see the same load), on a run directory and one large profile:
#   index          `heapwatch index RUN` with no sites.idx (every capture decoded, sites named)
#   growth-first   `growth RUN --json` with no sites.idx (decodes and writes the index)
#   growth-second  `growth RUN --json` again (reads the index)
#   top            `top PROFILE`, three times
# Prints 'build label wall_s cpu_s(user+sys) peak_rss_MiB' per measurement.
#
#   ROUNDS=2 bash bench/site-naming-cost.sh BEFORE_BIN AFTER_BIN RUN PROFILE
# RUN: e.g. target/bench-growth/full made by `CYCLE=1 ROUNDS=0 bash bench/growth-index.sh 400`.
set -euo pipefail
B=$1; A=$2; FULL=$3; BIG=$4; ROUNDS=${ROUNDS:-2}
T=$(mktemp)
trap 'rm -f "$T"' EXIT
m() {
    local label=$1; shift
    /usr/bin/time -f '%e %U %S %M' -o "$T" "$@" >/dev/null 2>&1
    read -r w u s r <"$T"
    python3 -c "print('$label', $w, round($u + $s, 2), $r // 1024)"
}
echo "date $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
    order="before after"
    [ $((round % 2)) = 0 ] && order="after before"
    for b in $order; do
        hw=$B
        [ "$b" = after ] && hw=$A
        rm -f "$FULL/sites.idx"; m "$b index" "$hw" index "$FULL"
        rm -f "$FULL/sites.idx"; m "$b growth-first" "$hw" growth "$FULL" --json
        m "$b growth-second" "$hw" growth "$FULL" --json
        for _ in 1 2 3; do m "$b top" "$hw" top "$BIG"; done
    done
    echo "round $round done; load $(cut -d' ' -f1-3 /proc/loadavg)"
done
