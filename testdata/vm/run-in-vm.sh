#!/usr/bin/env bash
# run-in-vm.sh: run one command inside a throwaway qemu VM booted with Debian's kernel, where
# cgroup v2 is the only hierarchy and has the memory controller, and bring its output files back.
#
#   run-in-vm.sh --out HOSTDIR [--mem 1024M] [--smp 2] [--timeout 180] [--file HOSTPATH]...
#                [--env NAME=VALUE]... [--keep-console] [--verbose] -- COMMAND [ARGS...]
#
# Inside the VM: / is the initramfs (busybox), /proc /sys /dev /tmp are mounted, cgroup2 is at
# /sys/fs/cgroup with +memory (and +pids +cpu) in the root's cgroup.subtree_control, lo is up,
# COMMAND runs as root in /tmp/out with stdin /dev/null and stdout+stderr on the serial console.
# Each --file is put at its own absolute path (an ELF executable brings its shared libraries and
# loader, as ldd lists them; a directory comes whole).
#
# On the host: everything the command left in /tmp/out is unpacked into HOSTDIR, HOSTDIR/exit_code
# holds its exit status, its console output is printed on stdout, timings on stderr, and the
# script exits with the command's status. Harness failures exit 124 (time-out) or 125 (anything
# else: boot, transfer, setup) and write no exit_code.
#
# Environment: HEAPWATCH_VM_CACHE (cache folder, default ~/.cache/heapwatch-vm), VM_KERNEL (a
# bzImage to boot instead of Debian's), VM_ACCEL (kvm|tcg, skips the KVM probe), VM_MACHINE
# (default pc), VM_APPEND (more kernel arguments), VM_INITRD_GZIP=1 (compress the per-call cpio).
set -euo pipefail

readonly EXIT_TIMEOUT=124
readonly EXIT_HARNESS=125
SCRIPT_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
readonly SCRIPT_PATH

log() { printf '[run-in-vm] %s\n' "$*" >&2; }
fail() { log "error: $*"; exit "$EXIT_HARNESS"; }
usage() {
    sed -n '5,6p' "$SCRIPT_PATH" | sed 's/^#//' >&2
    exit 2
}

# ---------------------------------------------------------------------------------------------
# Arguments
out_dir=""
mem=1024M
smp=2
timeout_s=180
keep_console=0
verbose=0
files=()
envs=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out_dir=${2:?--out needs a folder}; shift 2 ;;
        --mem) mem=${2:?--mem needs a size}; shift 2 ;;
        --smp) smp=${2:?--smp needs a count}; shift 2 ;;
        --timeout) timeout_s=${2:?--timeout needs seconds}; shift 2 ;;
        --file) files+=("${2:?--file needs a path}"); shift 2 ;;
        --env) envs+=("${2:?--env needs NAME=VALUE}"); shift 2 ;;
        --keep-console) keep_console=1; shift ;;
        --verbose|-v) verbose=1; shift ;;
        -h|--help) usage ;;
        --) shift; break ;;
        *) log "unknown argument: $1"; usage ;;
    esac
done
[[ -n "$out_dir" && $# -gt 0 ]] || usage
[[ "$timeout_s" =~ ^[0-9]+$ ]] || fail "--timeout must be whole seconds, got '$timeout_s'"
for e in "${envs[@]+"${envs[@]}"}"; do
    [[ "$e" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || fail "--env wants NAME=VALUE, got '$e'"
done

cache=${HEAPWATCH_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/heapwatch-vm}
mkdir -p "$cache" "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
t_start=$(now)
rm -f "$out_dir/exit_code" "$out_dir/vm-console.log"

# ---------------------------------------------------------------------------------------------
# Host packages: installed only when missing.
apt_install() {
    log "installing Debian packages: $*"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
        apt-get update -qq >/dev/null
        apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
            fail "apt-get install $* failed"
    fi
}
is_static_elf() { ! ldd "$1" >/dev/null 2>&1; }
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
if [[ ! -x /bin/busybox ]] || ! is_static_elf /bin/busybox; then need+=(busybox-static); fi
[[ ${#need[@]} -eq 0 ]] || apt_install "${need[@]}"
is_static_elf /bin/busybox || fail "/bin/busybox is not the static build (busybox-static)"

# ---------------------------------------------------------------------------------------------
# Kernel: VM_KERNEL, else a Debian kernel installed in /boot, else the vmlinuz of the package that
# linux-image-amd64 points at, fetched with apt-get download and unpacked into the cache (its
# postinst, initramfs-tools and 400 MB of modules are not needed: what we use is built in).
find_kernel() {
    if [[ -n "${VM_KERNEL:-}" ]]; then
        [[ -r "$VM_KERNEL" ]] || fail "VM_KERNEL=$VM_KERNEL is not readable"
        echo "$VM_KERNEL"; return
    fi
    local k
    for k in $(ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -V -r); do
        if dpkg -S "$k" >/dev/null 2>&1; then echo "$k"; return; fi
    done
    k=$(ls -1 "$cache"/vmlinuz-* 2>/dev/null | sort -V -r | head -n1 || true)
    if [[ -n "$k" ]]; then echo "$k"; return; fi

    local pkg tmp
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }')
    if [[ -z "$pkg" ]]; then
        apt-get update -qq >/dev/null
        pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ { print $2; exit }')
    fi
    [[ -n "$pkg" ]] || fail "cannot tell which kernel package linux-image-amd64 depends on"
    log "fetching Debian kernel package $pkg (vmlinuz only is kept, in $cache)"
    tmp=$(mktemp -d "$cache/dl.XXXXXX")
    # apt's _apt user must be able to write there, else apt warns and downloads as root.
    chmod 755 "$tmp"
    (cd "$tmp" && apt-get download -qq "$pkg" >/dev/null 2>&1) || { rm -rf "$tmp"; fail "apt-get download $pkg failed"; }
    dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*' './boot/config-*' ||
        { rm -rf "$tmp"; fail "no vmlinuz in $pkg"; }
    k=$(ls -1 "$tmp"/boot/vmlinuz-* | head -n1)
    mv -f "$tmp"/boot/config-* "$cache"/
    mv -f "$k" "$cache/"
    rm -rf "$tmp"
    echo "$cache/$(basename "$k")"
}
kernel=$(find_kernel)

# Under TCG most of a boot went into the guest unpacking the xz'd bzImage (about 2.5 s of 4). The
# Debian kernel has CONFIG_PVH, so qemu can start the plain vmlinux ELF directly: unpack it once,
# on the host, from the bzImage's payload (setup_sects at 0x1f1, payload_offset at 0x248).
unpacked_kernel() {
    local bz=$1 cfg vmlinux ss po magic tmpk
    cfg="$(dirname "$bz")/config-$(basename "$bz" | sed 's/^vmlinuz-//')"
    [[ -r "$cfg" ]] && grep -qx 'CONFIG_PVH=y' "$cfg" || return 1
    vmlinux="$cache/vmlinux-$(basename "$bz" | sed 's/^vmlinuz-//')-$(stat -c %s "$bz")"
    if [[ ! -s "$vmlinux" ]]; then
        command -v xz >/dev/null 2>&1 || apt_install xz-utils
        ss=$(od -An -tu1 -j $((0x1f1)) -N1 "$bz" | tr -d ' ')
        po=$(od -An -tu4 -j $((0x248)) -N4 "$bz" | tr -d ' ')
        magic=$(od -An -tx1 -j $(((ss + 1) * 512 + po)) -N6 "$bz" | tr -d ' \n')
        tmpk=$(mktemp "$vmlinux.XXXXXX")
        case "$magic" in
            # The decompressor stops at the stream's end, before the size word after it: tail's
            # SIGPIPE is expected.
            fd377a585a00) { tail -c +$(((ss + 1) * 512 + po + 1)) "$bz" || true; } | xz -dc --single-stream >"$tmpk" 2>/dev/null || { rm -f "$tmpk"; return 1; } ;;
            1f8b*) { tail -c +$(((ss + 1) * 512 + po + 1)) "$bz" || true; } | { gzip -dc 2>/dev/null || true; } >"$tmpk" ;;
            *) rm -f "$tmpk"; return 1 ;;
        esac
        [[ "$(head -c4 "$tmpk" | od -An -tx1 | tr -d ' \n')" == 7f454c46 ]] || { rm -f "$tmpk"; return 1; }
        chmod 644 "$tmpk"
        mv "$tmpk" "$vmlinux"
    fi
    echo "$vmlinux"
}
boot_kernel=$kernel
if [[ -z "${VM_KERNEL:-}" ]]; then
    boot_kernel=$(unpacked_kernel "$kernel") || boot_kernel=$kernel
fi

# ---------------------------------------------------------------------------------------------
# The initramfs's fixed part (busybox, /init, /etc), built once per (busybox, this script) and
# cached as a newc cpio. The per-call part is a second cpio appended to it: the kernel unpacks
# concatenated archives in order. (An uncompressed archive may not follow a gzip'd one: the
# kernel then says "invalid magic", so the fixed part stays uncompressed.)
write_init() {
    cat >"$1" <<'INIT'
#!/bin/sh
# PID 1 of the run-in-vm.sh VM.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TERM=dumb
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/null >/dev/console 2>&1
N=$(cat /vm/nonce)
mark() { echo "@@RUN-IN-VM:$N:$*@@"; }
quiet_kernel() { echo 1 >/proc/sys/kernel/printk; }
die() { quiet_kernel; mark "INIT-FAIL $*"; poweroff -f; sleep 5; }
mark "INIT $(cut -d' ' -f1 /proc/uptime 2>/dev/null)"
mount -t proc proc /proc || die "mount /proc"
mount -t sysfs sysfs /sys || die "mount /sys"
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# --file entries under /tmp arrived in the initramfs's /tmp: carry them over into the new tmpfs.
mkdir -p /.newtmp
mount -t tmpfs -o mode=1777 tmpfs /.newtmp || die "mount tmpfs for /tmp"
if [ -n "$(ls -A /tmp)" ]; then
    cp -a /tmp/. /.newtmp/ || die "copy initramfs /tmp into tmpfs"
    find /tmp -mindepth 1 -maxdepth 1 -exec rm -rf {} +
fi
mount -o move /.newtmp /tmp || die "move tmpfs onto /tmp"
# cgroup2 as systemd mounts it; plain if the kernel refuses an option.
mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup 2>/dev/null ||
    mount -t cgroup2 cgroup2 /sys/fs/cgroup || die "mount cgroup2 at /sys/fs/cgroup"
grep -qw memory /sys/fs/cgroup/cgroup.controllers || die "no memory controller in cgroup2 ($(cat /sys/fs/cgroup/cgroup.controllers))"
echo +memory >/sys/fs/cgroup/cgroup.subtree_control || die "cannot enable +memory for children"
for c in pids cpu; do
    if grep -qw "$c" /sys/fs/cgroup/cgroup.controllers; then
        echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || echo "run-in-vm: note: +$c not enabled"
    fi
done
ip link set lo up || die "ip link set lo up"
hostname vm
mkdir -p /tmp/out /root
cd /tmp/out || die "cd /tmp/out"
mark "CMD-START $(cut -d' ' -f1 /proc/uptime)"
/bin/sh /vm/cmd </dev/null
rc=$?
mark "CMD-EXIT $rc $(cut -d' ' -f1 /proc/uptime)"
# Nothing from the kernel in the middle of the block below.
quiet_kernel
cd /
tar -C /tmp/out -czf /tmp/.run-in-vm-out.tgz . || die "tar of /tmp/out failed"
sum=$(sha256sum /tmp/.run-in-vm-out.tgz | cut -d' ' -f1)
mark "OUT-BEGIN"
base64 /tmp/.run-in-vm-out.tgz
mark "OUT-END $rc $sum"
poweroff -f
sleep 5
INIT
}

fixed_key=$( { sha256sum /bin/busybox "$SCRIPT_PATH"; } | sha256sum | cut -c1-16)
base_cpio="$cache/base-$fixed_key.cpio"
if [[ ! -s "$base_cpio" ]]; then
    stage=$(mktemp -d "$cache/base.XXXXXX")
    (
        cd "$stage"
        mkdir -p bin sbin usr/bin usr/sbin etc root tmp proc sys dev run vm sys
        cp /bin/busybox bin/busybox
        for a in $(/bin/busybox --list); do
            [[ "$a" == busybox ]] || ln -s busybox "bin/$a"
        done
        write_init init
        chmod 755 init
        printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >etc/passwd
        printf 'root:x:0:\nnogroup:x:65534:\n' >etc/group
        printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n' >etc/hosts
        printf 'passwd: files\ngroup: files\nhosts: files\n' >etc/nsswitch.conf
        : >etc/resolv.conf
        find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet >"$stage.cpio"
    )
    mv "$stage.cpio" "$base_cpio" # atomic: concurrent calls may build it at the same time
    find "$cache" -maxdepth 1 -name 'base-*.cpio*' ! -path "$base_cpio" -delete
    rm -rf "$stage"
fi

# ---------------------------------------------------------------------------------------------
# Accelerator: KVM when it can boot this kernel, else TCG. The probe result is cached per host
# kernel and guest kernel.
probe_kvm() {
    # The host's kvm is PVM (kvm_pvm): it runs only guests built as PVM guests, not Debian's.
    if [[ -d /sys/module/kvm_pvm && ! -d /sys/module/kvm_intel && ! -d /sys/module/kvm_amd ]]; then
        echo "tcg host KVM is kvm_pvm (runs PVM guest kernels only)"; return
    fi
    if ! { exec 9<>/dev/kvm; } 2>/dev/null; then echo "tcg /dev/kvm cannot be opened"; return; fi
    exec 9>&-
    local d rc=0
    d=$(mktemp -d)
    printf '%s\n' '#!/bin/sh' 'mount -t devtmpfs d /dev; echo RUN-IN-VM-PROBE-OK >/dev/console; poweroff -f' >"$d/init"
    chmod 755 "$d/init"
    mkdir -p "$d/bin" && cp /bin/busybox "$d/bin/" && for a in sh mount echo poweroff; do ln -s busybox "$d/bin/$a"; done
    mkdir -p "$d/dev"
    (cd "$d" && find . -mindepth 1 | cpio -o -H newc -R 0:0 --quiet >"$d.cpio")
    # In a group whose stderr is dropped: bash reports a qemu abort ("Aborted") there.
    { timeout 30 qemu-system-x86_64 -accel kvm -cpu host -m 256M -nodefaults -no-user-config -display none \
        -serial file:"$d.log" -no-reboot -kernel "$boot_kernel" -initrd "$d.cpio" \
        -append "console=ttyS0 quiet panic=-1" </dev/null >"$d.qemu" 2>&1; } 2>/dev/null || rc=$?
    if grep -q RUN-IN-VM-PROBE-OK "$d.log" 2>/dev/null; then
        echo "kvm"
    else
        echo "tcg KVM probe failed (qemu rc $rc: $(head -c 200 "$d.qemu" | tr '\n' ' '))"
    fi
    rm -rf "$d" "$d.cpio" "$d.log" "$d.qemu"
}
if [[ -n "${VM_ACCEL:-}" ]]; then
    accel=$VM_ACCEL; accel_why="VM_ACCEL"
else
    probe_file="$cache/accel-$(uname -r)-$(basename "$kernel")"
    if [[ ! -s "$probe_file" ]]; then
        probe_kvm >"$probe_file.$$"
        mv "$probe_file.$$" "$probe_file"
    fi
    read -r accel accel_why <"$probe_file" || true
    [[ -n "$accel" ]] || fail "KVM probe gave nothing (see $probe_file)"
fi
case "$accel" in
    kvm) accel_args=(-accel kvm -cpu host) ;;
    tcg) accel_args=(-accel "tcg,thread=multi" -cpu max) ;;
    *) fail "unknown accelerator '$accel'" ;;
esac

# ---------------------------------------------------------------------------------------------
# pc, not microvm: under TCG microvm hung at boot in 2 of 6 tries, and its only clocksource was
# refined-jiffies (4 ms steps); pc boots as fast with the vmlinux and gives hpet.
machine=${VM_MACHINE:-pc}

# ---------------------------------------------------------------------------------------------
# Per-call part: the command, its environment, the --file contents.
work=$(mktemp -d "${TMPDIR:-/tmp}/run-in-vm.XXXXXX")
qpid=""
cleanup() {
    if [[ -n "$qpid" ]] && kill -0 "$qpid" 2>/dev/null; then kill -KILL "$qpid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stage="$work/stage"
mkdir -p "$stage/vm"
nonce="$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
echo "$nonce" >"$stage/vm/nonce"

sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; } # single-quote for sh
{
    echo '#!/bin/sh'
    for e in "${envs[@]+"${envs[@]}"}"; do
        echo "export ${e%%=*}=$(sq "${e#*=}")"
    done
    printf 'exec'
    for a in "$@"; do printf ' %s' "$(sq "$a")"; done
    echo
} >"$stage/vm/cmd"

put() { # put HOSTPATH into the stage at the same absolute path, following symlinks
    local src=$1 dst="$stage$1"
    [[ -e "$dst" ]] && return 0
    mkdir -p "$(dirname "$dst")"
    cp -rL --preserve=mode,timestamps "$src" "$dst"
}
is_elf() { [[ -f "$1" && "$(head -c4 "$1" | od -An -tx1 | tr -d ' \n')" == 7f454c46 ]]; }
for f in "${files[@]+"${files[@]}"}"; do
    [[ -e "$f" ]] || fail "--file $f does not exist"
    abs="$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
    put "$abs"
    if is_elf "$abs" && ldd "$abs" >/dev/null 2>&1; then
        deps=$(ldd "$abs") || fail "ldd $abs failed"
        if grep -q 'not found' <<<"$deps"; then fail "$abs: missing libraries: $(grep 'not found' <<<"$deps" | tr '\n' ' ')"; fi
        while read -r lib; do put "$lib"; done < <(awk '/=>/ { if ($3 ~ /^\//) print $3; next } $1 ~ /^\// { print $1 }' <<<"$deps")
    fi
done

initrd="$work/initrd.img"
cp "$base_cpio" "$initrd"
# Uncompressed by default: under TCG the guest's gunzip of a 180 MB debug binary cost more (about
# 2 s host gzip + 1.5 s guest) than loading the plain archive. VM_INITRD_GZIP=1 compresses it.
if [[ "${VM_INITRD_GZIP:-0}" == 1 ]]; then
    (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1 >>"$initrd")
else
    (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet >>"$initrd")
fi
t_built=$(now)

# ---------------------------------------------------------------------------------------------
# Boot, wait, enforce the time-out.
console="$work/console.log"
: >"$console"
cmdline="console=ttyS0 quiet panic=-1 cgroup_no_v1=all ${VM_APPEND:-}"
[[ "$machine" == microvm ]] && cmdline+=" pci=off" # microvm has no PCI; this stops a boot error line
log "booting $(basename "$boot_kernel") on $machine with $accel ($accel_why), mem $mem, smp $smp, initrd $(du -h "$initrd" | cut -f1)"
qemu-system-x86_64 "${accel_args[@]}" -machine "$machine" -smp "$smp" -m "$mem" \
    -nodefaults -no-user-config -display none -monitor none -serial file:"$console" -no-reboot \
    -kernel "$boot_kernel" -initrd "$initrd" -append "$cmdline" \
    </dev/null >"$work/qemu.log" 2>&1 &
qpid=$!
t_boot=$(now)
if [[ $verbose -eq 1 ]]; then
    tail -n +1 -f --pid="$qpid" "$console" | tr -d '\r' >&2 &
fi

mark="@@RUN-IN-VM:$nonce:"
deadline=$(awk -v t="$t_boot" -v d="$timeout_s" 'BEGIN { printf "%d", t + d }')
t_cmd="" t_exit="" timed_out=0
while kill -0 "$qpid" 2>/dev/null; do
    if [[ -z "$t_cmd" ]] && grep -qF "${mark}CMD-START" "$console"; then t_cmd=$(now); fi
    if [[ -n "$t_cmd" && -z "$t_exit" ]] && grep -qF "${mark}CMD-EXIT" "$console"; then t_exit=$(now); fi
    if [[ $(date +%s) -ge $deadline ]]; then
        timed_out=1
        kill -TERM "$qpid" 2>/dev/null || true
        sleep 1
        kill -KILL "$qpid" 2>/dev/null || true
        break
    fi
    sleep 0.05
done
qrc=0
wait "$qpid" 2>/dev/null || qrc=$?
qpid=""
t_end=$(now)
[[ -z "$t_cmd" ]] && grep -qF "${mark}CMD-START" "$console" && t_cmd=$t_end
[[ -z "$t_exit" ]] && grep -qF "${mark}CMD-EXIT" "$console" && t_exit=$t_end

# ---------------------------------------------------------------------------------------------
# Read the console: command output on stdout, the base64 block into HOSTDIR.
tr -d '\r' <"$console" >"$work/console.txt"
# The command's lines: between CMD-START and CMD-EXIT; a marker glued to an unfinished last line
# leaves that line's text in front of it.
awk -v m="$mark" '
    index($0, m "CMD-START") { on = 1; next }
    on && (i = index($0, m "CMD-EXIT")) { if (i > 1) print substr($0, 1, i - 1); exit }
    on { print }
' "$work/console.txt"

phase() { # how far the VM got, for messages
    if grep -qF "${mark}OUT-BEGIN" "$work/console.txt"; then echo "while sending /tmp/out back"
    elif grep -qF "${mark}CMD-EXIT" "$work/console.txt"; then echo "after the command, while packing /tmp/out"
    elif grep -qF "${mark}CMD-START" "$work/console.txt"; then echo "while the command was running"
    elif grep -qF "${mark}INIT " "$work/console.txt"; then echo "in /init, before the command started"
    else echo "before the kernel reached /init (boot failure)"; fi
}
harness_failure() { # CODE MESSAGE
    local code=$1; shift
    log "error: $*"
    grep -m1 -E 'Initramfs unpacking failed|Kernel panic|Out of memory|qemu-system' "$work/console.txt" | sed 's/^/[run-in-vm] kernel said: /' >&2 || true
    if grep -qF "${mark}INIT-FAIL" "$work/console.txt"; then
        log "init said: $(grep -F "${mark}INIT-FAIL" "$work/console.txt" | head -n1 | sed "s/.*INIT-FAIL //; s/@@\$//")"
    fi
    log "last console lines:"
    { grep -vF "$mark" "$work/console.txt" | grep -vE '^[A-Za-z0-9+/=]{60,}$' | tail -n 25 | sed 's/^/    | /' >&2; } || true
    if [[ -s "$work/qemu.log" ]]; then sed 's/^/    qemu: /' "$work/qemu.log" >&2; fi
    cp "$work/console.txt" "$out_dir/vm-console.log"
    log "whole console kept in $out_dir/vm-console.log"
    exit "$code"
}

if [[ $timed_out -eq 1 ]]; then
    harness_failure "$EXIT_TIMEOUT" "VM time-out: killed qemu after ${timeout_s}s, $(phase)"
fi
end_line=$(grep -F "${mark}OUT-END" "$work/console.txt" | head -n1 || true)
if [[ -z "$end_line" ]]; then
    harness_failure "$EXIT_HARNESS" "VM stopped (qemu rc $qrc) without sending a result, $(phase)"
fi
read -r rc sum < <(sed "s/.*OUT-END //; s/@@\$//" <<<"$end_line")
awk -v m="$mark" '
    index($0, m "OUT-BEGIN") { on = 1; next }
    index($0, m "OUT-END") { exit }
    on && /^[A-Za-z0-9+\/=]+$/ { print }
' "$work/console.txt" | base64 -d >"$work/out.tgz" 2>/dev/null ||
    harness_failure "$EXIT_HARNESS" "the base64 block from the VM does not decode"
got=$(sha256sum "$work/out.tgz" | cut -d' ' -f1)
[[ "$got" == "$sum" ]] || harness_failure "$EXIT_HARNESS" "the tar from the VM is corrupt (sha256 $got, VM said $sum)"
tar -xzf "$work/out.tgz" -C "$out_dir" --no-same-owner --warning=no-timestamp ||
    harness_failure "$EXIT_HARNESS" "cannot unpack the VM's /tmp/out into $out_dir"
echo "$rc" >"$out_dir/exit_code"
[[ $keep_console -eq 1 ]] && cp "$work/console.txt" "$out_dir/vm-console.log"

log "$accel: setup $(secs "$t_start" "$t_built")s, boot-to-command $(secs "$t_boot" "${t_cmd:-$t_end}")s," \
    "command $(secs "${t_cmd:-$t_end}" "${t_exit:-$t_end}")s, after $(secs "${t_exit:-$t_end}" "$t_end")s," \
    "total $(secs "$t_start" "$t_end")s, exit $rc"
exit "$rc"
