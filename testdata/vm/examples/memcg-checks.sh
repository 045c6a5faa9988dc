#!/usr/bin/env bash
# Host side: builds go/alloc and go/memwatch (static), then runs memcg-grow.sh in the VM for
# memory.max 64M alone and with memory.high at 48M, max-8M and max-2M. Results go under OUTROOT
# (default target/vm-memcg), one folder per case.
#   memcg-checks.sh [OUTROOT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
vm=$(dirname "$here")
outroot=${1:-$(cd "$vm/../.." && pwd)/target/vm-memcg}
bin=$(mktemp -d /tmp/vm-memcg-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
(cd "$vm/go" && CGO_ENABLED=0 go build -o "$bin/" ./alloc ./memwatch)

status=0
for c in "64M" "64M 48M" "64M 56M" "64M 62M"; do
    read -r max high <<<"$c"
    name="max$max${high:+-high$high}"
    echo "== $name"
    rc=0
    "$vm/run-in-vm.sh" --out "$outroot/$name" --timeout 300 \
        --file "$bin/alloc" --file "$bin/memwatch" --file "$here/memcg-grow.sh" \
        -- "$here/memcg-grow.sh" "$bin" "$max" ${high:+"$high"} || rc=$?
    # The allocator must end OOM-killed (137) with oom_kill counted.
    if [[ $rc -ne 137 ]] || ! grep -q 'oom_kill 1' "$outroot/$name/events.log"; then
        echo "!! $name: expected exit 137 and oom_kill 1, got exit $rc"
        status=1
    fi
done
exit $status
