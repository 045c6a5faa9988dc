#!/bin/sh
# Runs inside the VM (run-in-vm.sh): puts go/alloc in a fresh cgroup with memory.max (and
# optionally memory.high), swap off, watches memory.events with go/memwatch, and sums up what
# happened: exit status, memory.events, and when memory.high was first crossed vs the OOM kill.
#   memcg-grow.sh BINDIR MAX [HIGH]      e.g. memcg-grow.sh /tmp/vmbin 64M 48M
set -u
bin=$1 max=$2 high=${3:-max}
cg=/sys/fs/cgroup/t
mkdir "$cg"
echo "$max" >"$cg/memory.max"
echo 0 >"$cg/memory.swap.max"
echo "$high" >"$cg/memory.high"
echo "transparent_hugepage: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
echo "cgroup $cg: memory.max=$(cat $cg/memory.max) memory.high=$(cat $cg/memory.high) memory.swap.max=$(cat $cg/memory.swap.max)"

"$bin/memwatch" -cg "$cg" -o events.log -ready ready &
wpid=$!
i=0
while [ ! -e ready ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i + 1)); done
[ -e ready ] || { echo "memwatch did not start"; exit 1; }

# A shell moves itself into the cgroup, then becomes the allocator.
sh -c "echo \$\$ >$cg/cgroup.procs && exec $bin/alloc" >alloc.log 2>&1
rc=$?
sleep 0.3
kill "$wpid"
echo "alloc exit status: $rc"
echo "memory.events: $(tr '\n' ' ' <$cg/memory.events)"
echo "memory.peak: $(cat $cg/memory.peak 2>/dev/null)  memory.current: $(cat $cg/memory.current)"

awk -v highset="$high" '
    function field(name,   i) { for (i = 1; i <= NF; i++) if ($i == name) return $(i + 1); return "" }
    FILENAME ~ /alloc.log/ && /^alloc start/ { split($3, a, "="); t0 = a[2] }
    FILENAME ~ /alloc.log/ && /held_mib=/ {
        split($2, a, "="); t = a[2]; split($3, b, "="); held = b[2]; split($4, c, "="); st = c[2]
        steps++; last_t = t; last_held = held
        if (st > maxstep) { maxstep = st; maxstep_held = held }
        if (st > 100000) slow++
    }
    FILENAME ~ /events.log/ && /events:/ {
        src = $2; h = field("high"); k = field("oom_kill")
        if (src == "inotify") ninot++; else npoll++
        if (h + 0 > 0 && t_high == "") { split($1, a, "="); t_high = a[2] }
        if (k + 0 > 0 && t_kill == "") { split($1, a, "="); t_kill = a[2] }
    }
    END {
        printf "alloc: %d steps logged, last at %.3f s holding %d MiB; slowest step %.3f s (at %d MiB); steps over 0.1 s: %d\n", steps, (last_t - t0) / 1e6, last_held, maxstep / 1e6, maxstep_held, slow
        printf "watch: %d inotify wake-ups, %d poll wake-ups\n", ninot, npoll
        if (t_high != "") printf "first memory.events high>0 at %.3f s after start\n", (t_high - t0) / 1e6
        if (t_kill != "") printf "oom_kill seen at %.3f s after start\n", (t_kill - t0) / 1e6
        if (t_high != "" && t_kill != "") printf "held between crossing memory.high and the OOM kill: %.3f s\n", (t_kill - t_high) / 1e6
    }
' alloc.log events.log
exit "$rc"
