#!/usr/bin/env bash
# Builds the misbehaving Go programs in testdata/go/cmd, runs each one with its
# pprof server on 127.0.0.1:0, fetches profiles at fixed times after start and
# writes them to testdata/profiles/ under fixed names. Re-runnable: it
# overwrites the same files. Needs go and curl.
#
#   testdata/capture.sh            # capture into testdata/profiles
#   OUT=/some/dir testdata/capture.sh
#
# bigprofile (the multi-megabyte benchmark profile) is not captured here; see
# profiles/README.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/go
out=${OUT:-$here/profiles}
mkdir -p "$out"
out=$(cd "$out" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-capture.XXXXXX")
pids=()

cleanup() {
	local pid
	for pid in "${pids[@]+"${pids[@]}"}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
	rm -f "$out"/.*.tmp
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { printf '%s\n' "capture: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

command -v go >/dev/null || die "go not found"
command -v curl >/dev/null || die "curl not found"

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# ---------------------------------------------------------------- build
build() { # build OUTPUT PACKAGE [go build flags...]
	# Static, pure-Go binaries: no C toolchain needed, and profiles map one file.
	local output=$1 pkg=$2
	shift 2
	(cd "$src" && CGO_ENABLED=0 go build -trimpath "$@" -o "$output" "$pkg") || die "go build $pkg failed"
}

t_build=$(now_ms)
log "building into $work/bin"
for prog in steady hiddenleak goroutineleak storm boundedcache oomgrow; do
	build "$work/bin/$prog" "./cmd/$prog"
done
# The two controller builds get the same file name, like two releases would.
build "$work/bin/2.0.2/controller" ./cmd/controller
build "$work/bin/2.1.0/controller" ./cmd/controller -tags regressed
log "built in $(($(now_ms) - t_build)) ms"

# ---------------------------------------------------------------- run
# Set by start: the target's pid, address and start time (ms).
pid= addr= started=

start() { # start NAME BINARY [ARGS...]
	local name=$1 bin=$2
	shift 2
	local stdout=$work/$name.out
	started=$(now_ms)
	"$bin" -listen 127.0.0.1:0 "$@" >"$stdout" 2>"$work/$name.err" &
	pid=$!
	pids+=("$pid")
	local line=
	while :; do
		line=$(head -n 1 "$stdout" 2>/dev/null || true)
		case $line in
		"listening on "*) break ;;
		esac
		kill -0 "$pid" 2>/dev/null || die "$name exited before listening: $(cat "$work/$name.err")"
		(($(now_ms) - started < 10000)) || die "$name did not print its listening line within 10 s"
		sleep 0.02
	done
	addr=${line#listening on }
	log "$name: pid $pid on $addr"
}

wait_until() { # wait_until SECONDS (since start)
	local left=$(($1 * 1000 - ($(now_ms) - started)))
	if ((left > 0)); then
		# In the background, so that a signal runs the trap at once.
		sleep "$((left / 1000)).$(printf '%03d' $((left % 1000)))" &
		wait $!
	fi
}

fetch() { # fetch PATH FILE
	local path=$1 file=$2
	local tmp=$out/.$file.tmp
	curl -fsS --max-time 20 -o "$tmp" "http://$addr$path" || die "fetch $path from $addr failed"
	gzip -t "$tmp" 2>/dev/null || die "$path from $addr is not gzip"
	mv -f "$tmp" "$out/$file"
	log "  $file at $(printf '%.1f' "$(($(now_ms) - started))e-3") s, $(wc -c <"$out/$file") bytes"
}

stop() {
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	local p keep=()
	for p in "${pids[@]}"; do
		[[ $p == "$pid" ]] || keep+=("$p")
	done
	pids=("${keep[@]+"${keep[@]}"}")
}

t_run=$(now_ms)
bin=$work/bin

start steady "$bin/steady"
wait_until 3
fetch /debug/pprof/heap steady-heap.pb.gz
fetch /debug/pprof/goroutine steady-goroutine.pb.gz
fetch /debug/pprof/allocs steady-allocs.pb.gz
stop

start hiddenleak "$bin/hiddenleak"
wait_until 2
fetch /debug/pprof/heap hiddenleak-heap-early.pb.gz
wait_until 8
fetch /debug/pprof/heap hiddenleak-heap-late.pb.gz
stop

start hiddenleak-rate4k "$bin/hiddenleak" -memprofilerate 4096
wait_until 6
fetch /debug/pprof/heap hiddenleak-heap-rate4k.pb.gz
stop

start goroutineleak "$bin/goroutineleak"
wait_until 3
fetch /debug/pprof/goroutine goroutineleak-goroutine.pb.gz
fetch /debug/pprof/heap goroutineleak-heap.pb.gz
stop

start storm "$bin/storm"
wait_until 7
fetch /debug/pprof/heap storm-heap.pb.gz
stop

start boundedcache "$bin/boundedcache"
wait_until 5
fetch /debug/pprof/heap boundedcache-heap.pb.gz
stop

for v in 2.0.2 2.1.0; do
	start "controller-$v" "$bin/$v/controller"
	version=
	for _ in $(seq 100); do
		version=$(sed -n 2p "$work/controller-$v.out")
		[[ -n $version ]] && break
		sleep 0.02
	done
	[[ $version == "version $v" ]] || die "controller-$v printed '$version' as its second line"
	wait_until 4
	fetch /debug/pprof/heap "controller-$v-heap.pb.gz"
	stop
done
log "ran in $(($(now_ms) - t_run)) ms"

# ---------------------------------------------------------------- check
# Every file must open in pprof, and the hidden leak must be visible.
for f in "$out"/*.pb.gz; do
	go tool pprof -top "$f" >/dev/null 2>"$work/pprof.err" || die "pprof cannot open $f: $(cat "$work/pprof.err")"
done
top=$(go tool pprof -top -sample_index=inuse_space "$out/hiddenleak-heap-late.pb.gz" 2>/dev/null)
grep -q 'main\.loadCatalog$' <<<"$top" || die "hiddenleak-heap-late: main.loadCatalog missing"
grep -q 'main\.(\*sessionTable)\.remember$' <<<"$top" || die "hiddenleak-heap-late: main.(*sessionTable).remember missing"
log "done: $(du -sh "$out" | cut -f1) in $out"
