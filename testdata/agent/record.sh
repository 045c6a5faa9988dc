#!/usr/bin/env bash
# Records real replies of the OpenZiti agent (github.com/openziti/agent, embedded in
# testdata/go/cmd/agentgrow) into testdata/agent/, for the parsers' unit tests. The replies are
# fetched with the module's own client (testdata/go/cmd/agentcall). Re-runnable: it overwrites
# the same files. Needs go.
#
#   testdata/agent/record.sh
#   OUT=/some/dir testdata/agent/record.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../go" && pwd)
out=${OUT:-$here}
mkdir -p "$out"

work=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-agent.XXXXXX")
pid=
cleanup() {
	[[ -n $pid ]] && { kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { printf '%s\n' "record: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}
command -v go >/dev/null || die "go not found"

(cd "$src" && CGO_ENABLED=0 go build -trimpath -o "$work/bin/" ./cmd/agentgrow ./cmd/agentcall) || die "go build failed"

# The default socket name, in a private temp dir: $TMPDIR/gops-agent.PID.sock.
TMPDIR=$work "$work/bin/agentgrow" -app-id record -app-version 1.2.3 -rate 24MiB -peers 10 \
	>"$work/agentgrow.out" 2>"$work/agentgrow.err" &
pid=$!
for _ in $(seq 500); do
	grep -q '^agent on ' "$work/agentgrow.out" 2>/dev/null && break
	kill -0 "$pid" 2>/dev/null || die "agentgrow exited: $(cat "$work/agentgrow.err")"
	sleep 0.01
done
addr=$(sed -n 's/^agent on //p' "$work/agentgrow.out")
[[ $addr == "unix:$work/gops-agent.$pid.sock" ]] || die "agentgrow listens on '$addr', not the default socket"
sleep 2 # a few MiB retained, a GC or two, twenty leaked goroutines

call() { # call OP FILE
	"$work/bin/agentcall" "$addr" "$1" >"$out/$2" || die "op $1 failed"
	log "$2: $(wc -c <"$out/$2") bytes"
}
call memstats memstats.txt
call stats stats.txt
call stack goroutine-stack.txt
call version version.txt
call appinfo appinfo.json
log "done: replies of agentgrow pid $pid in $out"
