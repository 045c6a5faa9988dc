#!/usr/bin/env bash
# Records the run directories under testdata/runs/: each misbehaving Go program
# of testdata/go/cmd runs on a free loopback port while the real collector
# (`heapwatch collect`, built here in release mode) watches it, exactly as a
# maintainer would. Re-runnable: every run directory it records is replaced.
# Needs cargo and go; the oomgrow scenario wants root for a v1 memory cgroup
# (without one, or with RECORD_WATCHDOG=1, a watchdog plays the kernel: see
# runs/README.md).
#
#   testdata/record-runs.sh                 # every scenario
#   testdata/record-runs.sh storm steady    # only these
#   OUT=/some/dir testdata/record-runs.sh   # somewhere else
#   testdata/record-runs.sh demo-2.1.0 demo-2.0.2   # the recording `heapwatch demo` embeds
#                                           # (not part of "every scenario"; needs root)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${OUT:-$here/runs}
mkdir -p "$out"
out=$(cd "$out" && pwd)

LIMIT=256MiB
LIMIT_BYTES=$((256 << 20))
CGROUP_ROOT=/sys/fs/cgroup/memory

work=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-record.XXXXXX")
pids=()
cgroup=

exec 3>&2 # the log, still on stderr where a loop silences fd 2
log() { printf '%s\n' "record: $*" >&3; }
die() {
	log "error: $*"
	exit 1
}

kill_pid() { # kill_pid PID SIGNAL: signal and reap one process we started
	kill -"$2" "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

cleanup() {
	local pid
	for pid in "${pids[@]+"${pids[@]}"}"; do
		kill_pid "$pid" KILL
	done
	if [[ -n $cgroup && -d $cgroup ]]; then
		local _ p
		for _ in $(seq 50); do
			[[ -s $cgroup/cgroup.procs ]] || break
			while read -r p; do kill -KILL "$p" 2>/dev/null || true; done <"$cgroup/cgroup.procs"
			sleep 0.1
		done
		for _ in $(seq 20); do
			rmdir "$cgroup" 2>/dev/null && break
			sleep 0.1
		done
		[[ -d $cgroup ]] && log "could not remove $cgroup"
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

forget() { # forget PID: drop a reaped process from the cleanup list
	local p keep=()
	for p in "${pids[@]+"${pids[@]}"}"; do
		[[ $p == "$1" ]] || keep+=("$p")
	done
	pids=("${keep[@]+"${keep[@]}"}")
}

command -v go >/dev/null || die "go not found"
command -v cargo >/dev/null || die "cargo not found"

now_ms() { echo $(($(date +%s%N) / 1000000)); }

sleep_ms() { # in the background, so that a signal runs the trap at once
	sleep "$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))" &
	wait $!
}

# ---------------------------------------------------------------- build
log "building heapwatch (cargo build --release)"
(cd "$repo" && cargo build --release --quiet) || die "cargo build failed"
target_dir=$(cd "$repo" && cargo metadata --format-version 1 --no-deps |
	sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
hw=${target_dir:-$repo/target}/release/heapwatch
[[ -x $hw ]] || die "$hw not built"
# A private copy: a later cargo build elsewhere must not swap the binary mid-run.
cp "$hw" "$work/heapwatch"
hw=$work/heapwatch

build() { # build OUTPUT PACKAGE [go build flags...]
	local output=$1 pkg=$2
	shift 2
	(cd "$here/go" && CGO_ENABLED=0 go build -trimpath "$@" -o "$output" "$pkg") || die "go build $pkg failed"
}
log "building the Go fixtures into $work/bin"
for prog in steady hiddenleak goroutineleak storm boundedcache oomgrow; do
	build "$work/bin/$prog" "./cmd/$prog"
done
build "$work/bin/2.0.2/controller" ./cmd/controller
build "$work/bin/2.1.0/controller" ./cmd/controller -tags regressed

# ---------------------------------------------------------------- helpers
# Set by start: the target's pid and address.
pid= addr=

start() { # start NAME LISTEN BINARY [ARGS...]  (BINARY may be "cg:BINARY": run it in $cgroup)
	local name=$1 listen=$2 bin=$3
	shift 3
	local stdout=$work/$name.out t0
	: >"$stdout"
	t0=$(now_ms)
	case $bin in
	cg:*)
		# The shell joins the cgroup, then becomes the program: inside before it allocates.
		sh -c 'cg=$1 bin=$2 listen=$3; shift 3; echo $$ >"$cg/cgroup.procs" && exec "$bin" -listen "$listen" "$@"' \
			sh "$cgroup" "${bin#cg:}" "$listen" "$@" >"$stdout" 2>>"$work/$name.err" &
		;;
	*) "$bin" -listen "$listen" "$@" >"$stdout" 2>>"$work/$name.err" & ;;
	esac
	pid=$!
	pids+=("$pid")
	local line=
	while :; do
		line=$(head -n 1 "$stdout" 2>/dev/null || true)
		case $line in "listening on "*) break ;; esac
		kill -0 "$pid" 2>/dev/null || die "$name exited before listening: $(cat "$work/$name.err")"
		(($(now_ms) - t0 < 10000)) || die "$name did not print its listening line within 10 s"
		sleep 0.01
	done
	addr=${line#listening on }
}

stop() { # stop PID
	kill_pid "$1" TERM
	forget "$1"
}

# Common collector flags: heap and goroutine profiles, both every 250 ms.
COLLECT=(--interval 250ms --profiles heap,goroutine --goroutine-interval 250ms --quiet)

finish_run() { # finish_run NAME: replace testdata/runs/NAME with the recorded run
	local name=$1 dir=$work/runs/$1
	[[ -s $dir/manifest.jsonl ]] || die "$name: no manifest.jsonl"
	rm -f "$dir"/profiles/.*.tmp "$dir"/*.lock 2>/dev/null || true
	rm -rf "${out:?}/$name"
	cp -r "$dir" "$out/$name"
	local n stored
	n=$(wc -l <"$dir/manifest.jsonl")
	stored=$(find "$dir/profiles" -type f | wc -l)
	log "$name: $n manifest lines, $stored profiles, $(du -sh "$out/$name" | cut -f1)"
}

simple() { # simple NAME SECONDS BINARY [FIXTURE ARGS...] [-- COLLECT ARGS...]
	local name=$1 secs=$2 bin=$3
	shift 3
	local fargs=() cargs=()
	while (($#)); do
		[[ $1 == -- ]] && {
			shift
			cargs=("$@")
			break
		}
		fargs+=("$1")
		shift
	done
	start "$name" 127.0.0.1:0 "$bin" "${fargs[@]+"${fargs[@]}"}"
	local target=$pid
	log "$name: pid $target on $addr, collecting ${secs}s"
	mkdir -p "$work/runs"
	"$hw" collect "http://$addr" --out "$work/runs/$name" "${COLLECT[@]}" \
		--duration "${secs}s" "${cargs[@]+"${cargs[@]}"}" || die "$name: collect failed"
	stop "$target"
	finish_run "$name"
}

# ---------------------------------------------------------------- oomgrow
rss_bytes() { # resident set of a pid, bytes (empty when gone)
	awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status" 2>/dev/null || true
}

oomgrow() {
	local name=oomgrow cycles=3 mode
	cgroup=$CGROUP_ROOT/heapwatch-rec-$$
	if [[ -z ${RECORD_WATCHDOG:-} ]] && mkdir "$cgroup" 2>/dev/null && echo "$LIMIT_BYTES" >"$cgroup/memory.limit_in_bytes" 2>/dev/null; then
		# With swap accounting, swap must not extend the limit.
		echo "$LIMIT_BYTES" >"$cgroup/memory.memsw.limit_in_bytes" 2>/dev/null || true
		mode=cgroup
	else
		rmdir "$cgroup" 2>/dev/null || true
		cgroup=
		mode=watchdog
		log "$name: no writable v1 memory cgroup: a watchdog kills oomgrow at RSS $LIMIT (noted in README)"
	fi
	local bin=$work/bin/oomgrow
	[[ $mode == cgroup ]] && bin=cg:$bin
	mkdir -p "$work/runs"

	# The first boot picks a free port; the restarts reuse it, like a restarted pod.
	start "$name-1" 127.0.0.1:0 "$bin"
	local listen=$addr collector
	log "$name: mode $mode, pid $pid on $listen"
	local extra=(--limit "$LIMIT")
	[[ $mode == cgroup ]] && extra+=(--cgroup "$cgroup")
	"$hw" collect "http://$listen" --out "$work/runs/$name" "${COLLECT[@]}" \
		--timeout 1s "${extra[@]}" 2>"$work/collector.err" &
	collector=$!
	pids+=("$collector")

	local cycle t0 status rss
	for cycle in $(seq "$cycles"); do
		if ((cycle > 1)); then
			sleep_ms 300 # the restart delay of a supervisor
			start "$name-$cycle" "$listen" "$bin"
		fi
		t0=$(now_ms)
		# stderr off for the loop: bash would print a "Killed" job notice when it reaps the target.
		while kill -0 "$pid" 2>/dev/null; do
			if [[ $mode == watchdog ]]; then
				rss=$(rss_bytes "$pid")
				if [[ -n $rss ]] && ((rss > LIMIT_BYTES)); then
					kill -KILL "$pid" 2>/dev/null || true
				fi
			fi
			(($(now_ms) - t0 < 60000)) || die "$name: cycle $cycle was not killed within 60 s"
			sleep 0.02
		done 2>/dev/null
		status=0
		wait "$pid" 2>/dev/null || status=$? # no "Killed" job notice
		forget "$pid"
		((status == 137)) || die "$name: cycle $cycle ended with status $status, not SIGKILL: $(cat "$work/$name-$cycle.err" 2>/dev/null)"
		log "$name: cycle $cycle killed after $(($(now_ms) - t0)) ms"
	done
	if [[ $mode == cgroup ]]; then
		log "$name: kernel OOM kills in $cgroup: $(awk '/^oom_kill / { print $2 }' "$cgroup/memory.oom_control" 2>/dev/null || echo '?')"
	fi
	sleep_ms 1000 # let the collector see the last target gone, then Ctrl-C it
	kill -INT "$collector" 2>/dev/null || true
	status=0
	wait "$collector" || status=$?
	forget "$collector"
	((status == 0)) || die "$name: collector exited $status: $(cat "$work/collector.err")"
	if [[ -n $cgroup ]]; then
		rmdir "$cgroup" 2>/dev/null || log "could not remove $cgroup yet (cleanup retries)"
		[[ -d $cgroup ]] || cgroup=
	fi
	finish_run "$name"
}

# ---------------------------------------------------------------- demo (heapwatch demo)
# The recording `heapwatch demo` embeds: the controller fixture's two builds doing the same
# work, each in its own v1 memory cgroup of 256 MiB watched with --cgroup. 2.1.0 is OOM-killed
# by the kernel and restarted on the same port (DEMO_CYCLES boot cycles); 2.0.2 runs as long
# and lives. Both start with a 1 s "migration" (-delay) before events flow, so the growth has
# an onset to find. Written to demo/recording/VERSION (DEMO_OUT elsewhere). Needs root and
# the v1 memory controller: the demo shows what the kernel did, so there is no watchdog mode.
DEMO_CYCLES=${DEMO_CYCLES:-3}
DEMO_COLLECT=(--interval 250ms --profiles heap,goroutine --goroutine-interval 1s
	--memory-interval 100ms --timeout 1s --quiet)

demo_cgroup() { # demo_cgroup VERSION: make $cgroup, a 256 MiB v1 memory cgroup
	cgroup=$CGROUP_ROOT/heapwatch-demo-$$-$1
	mkdir "$cgroup" 2>/dev/null && echo "$LIMIT_BYTES" >"$cgroup/memory.limit_in_bytes" 2>/dev/null ||
		die "demo: needs root and a v1 memory cgroup at $CGROUP_ROOT"
	echo "$LIMIT_BYTES" >"$cgroup/memory.memsw.limit_in_bytes" 2>/dev/null || true
}

demo_finish() { # demo_finish VERSION: move the run into place, drop the cgroup
	local v=$1 dir=$work/runs/demo-$1 dest=${DEMO_OUT:-$repo/demo/recording}/$1
	rmdir "$cgroup" 2>/dev/null || log "could not remove $cgroup yet (cleanup retries)"
	[[ -d $cgroup ]] || cgroup=
	[[ -s $dir/manifest.jsonl ]] || die "demo-$v: no manifest.jsonl"
	rm -rf "$dest"
	mkdir -p "$(dirname "$dest")"
	cp -r "$dir" "$dest"
	log "demo-$v: $(wc -l <"$dir/manifest.jsonl") manifest lines, $(find "$dir/profiles" -type f | wc -l) profiles, $(du -sh --apparent-size "$dest" | cut -f1)"
}

demo_seconds() { # how long the 2.1.0 recording lasted (2.0.2 runs as long), whole seconds
	local m=${DEMO_OUT:-$repo/demo/recording}/2.1.0/manifest.jsonl first last
	if [[ -s $m ]]; then
		first=$(head -n 1 "$m" | sed -n 's/.*"t_ms":\([0-9]*\).*/\1/p')
		last=$(tail -n 1 "$m" | sed -n 's/.*"t_ms":\([0-9]*\).*/\1/p')
		echo $(((last - first + 999) / 1000))
	else
		echo 26
	fi
}

demo_regressed() { # 2.1.0: OOM-killed DEMO_CYCLES times
	local name=demo-2.1.0 bin=cg:$work/bin/2.1.0/controller collector cycle t0 status
	demo_cgroup 2.1.0
	mkdir -p "$work/runs"
	start "$name-1" 127.0.0.1:0 "$bin" -delay 1s
	local listen=$addr
	log "$name: pid $pid on $listen in $cgroup"
	"$hw" collect "http://$listen" --out "$work/runs/$name" "${DEMO_COLLECT[@]}" \
		--cgroup "$cgroup" --label 2.1.0 2>"$work/collector.err" &
	collector=$!
	pids+=("$collector")
	for cycle in $(seq "$DEMO_CYCLES"); do
		if ((cycle > 1)); then
			sleep_ms 300 # a supervisor's restart delay
			start "$name-$cycle" "$listen" "$bin" -delay 1s
		fi
		t0=$(now_ms)
		while kill -0 "$pid" 2>/dev/null; do
			(($(now_ms) - t0 < 60000)) || die "$name: cycle $cycle was not killed within 60 s"
			sleep 0.02
		done 2>/dev/null
		status=0
		wait "$pid" 2>/dev/null || status=$?
		forget "$pid"
		((status == 137)) || die "$name: cycle $cycle ended with status $status, not SIGKILL"
		log "$name: cycle $cycle killed after $(($(now_ms) - t0)) ms"
	done
	log "$name: kernel OOM kills: $(awk '/^oom_kill / { print $2 }' "$cgroup/memory.oom_control" 2>/dev/null || echo '?')"
	sleep_ms 1000
	kill -INT "$collector" 2>/dev/null || true
	status=0
	wait "$collector" || status=$?
	forget "$collector"
	((status == 0)) || die "$name: collector exited $status: $(cat "$work/collector.err")"
	demo_finish 2.1.0
}

demo_baseline() { # 2.0.2: the same work for as long, alive at the end
	local name=demo-2.0.2 secs
	secs=$(demo_seconds)
	demo_cgroup 2.0.2
	mkdir -p "$work/runs"
	start "$name" 127.0.0.1:0 "cg:$work/bin/2.0.2/controller" -delay 1s
	local target=$pid
	log "$name: pid $target on $addr in $cgroup, collecting ${secs}s"
	"$hw" collect "http://$addr" --out "$work/runs/$name" "${DEMO_COLLECT[@]}" \
		--cgroup "$cgroup" --label 2.0.2 --duration "${secs}s" || die "$name: collect failed"
	kill -0 "$target" 2>/dev/null || die "$name: 2.0.2 died; it should not"
	stop "$target"
	demo_finish 2.0.2
}

# ---------------------------------------------------------------- scenarios
scenario() {
	local b=$work/bin
	case $1 in
	hiddenleak) simple hiddenleak 12 "$b/hiddenleak" -rate 2MiB ;;
	storm) simple storm 10 "$b/storm" -storm-start 3s -storm-end 6s ;;
	goroutineleak) simple goroutineleak 8 "$b/goroutineleak" ;;
	steady) simple steady 8 "$b/steady" ;;
	boundedcache) simple boundedcache 10 "$b/boundedcache" ;;
	oomgrow) oomgrow ;;
	controller-2.0.2 | controller-2.1.0)
		local v=${1#controller-}
		simple "$1" 8 "$b/$v/controller" -- --label "$v"
		local version
		version=$(sed -n 2p "$work/$1.out")
		[[ $version == "version $v" ]] || die "$1 printed '$version' as its second line"
		;;
	demo-2.1.0) demo_regressed ;;
	demo-2.0.2) demo_baseline ;;
	*) die "unknown scenario $1" ;;
	esac
}

all=(hiddenleak storm goroutineleak steady boundedcache oomgrow controller-2.0.2 controller-2.1.0)
t_run=$(now_ms)
chosen=("$@")
((${#chosen[@]})) || chosen=("${all[@]}")
for s in "${chosen[@]}"; do
	scenario "$s"
done
log "recorded in $(($(now_ms) - t_run)) ms: $(du -sh "$out" | cut -f1) in $out"
