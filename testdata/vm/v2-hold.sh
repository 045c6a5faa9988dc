#!/bin/sh
# Runs inside the VM of run-in-vm.sh (busybox sh, cgroup v2 at /sys/fs/cgroup): the OOM hold on
# cgroup v2, for tests/cli/cgroup_v2.rs to judge from what it leaves in /tmp/out.
#   1. `heapwatch run --oom-hold` on a grower that the kernel OOM-kills twice: /tmp/out/run.
#   2. `collect --oom-hold` on a cgroup it did not make, heapwatch SIGKILLed while it holds:
#      memory.high while held, after the kill (its guardian's put-back) and the cgroup's
#      memory.events once the grower is dead, in /tmp/out/guard/.
#   v2-hold.sh HEAPWATCH REPLAY
set -u
HW=$1
REPLAY=$2
"$HW" run -q --limit 96MiB --restarts 1 --interval 1s --burst-interval 100ms --oom-hold 2s \
    --out /tmp/out/run -- "$REPLAY" -rate 40MiB
echo "run exit $?"

G=/sys/fs/cgroup/held
OUT=/tmp/out/guard
mkdir -p "$G" "$OUT"
echo 64M > "$G/memory.max"
echo 0 > "$G/memory.swap.max"
sh -c "echo \$\$ > $G/cgroup.procs; exec $REPLAY -rate 8MiB" > /dev/null 2>&1 &
GROWER=$!
# Captures 30 s apart: none ends the hold before heapwatch is killed.
"$HW" collect "proc:cgroup:$G" --out "$OUT/run" --interval 30s --burst-interval 30s \
    --oom-hold 60s -q > "$OUT/collect.log" 2>&1 &
COLLECTOR=$!
i=0
until [ "$(cat "$G/memory.high")" != max ] && grep -q '^high [1-9]' "$G/memory.events"; do
    i=$((i + 1))
    if [ $i -gt 1200 ]; then echo "never held" > "$OUT/failed"; break; fi
    sleep 0.05
done
cat "$G/memory.high" > "$OUT/high_while_held"
sleep 0.3
kill -9 "$COLLECTOR"
i=0
until [ "$(cat "$G/memory.high")" = max ] || [ $i -gt 200 ]; do i=$((i + 1)); sleep 0.05; done
cat "$G/memory.high" > "$OUT/high_after_kill"
i=0
while kill -0 "$GROWER" 2> /dev/null && [ $i -gt -1 ] && [ $i -lt 1200 ]; do i=$((i + 1)); sleep 0.05; done
wait "$GROWER"
echo "$?" > "$OUT/grower_exit"
cat "$G/memory.events" > "$OUT/events_after"
rmdir "$G"
