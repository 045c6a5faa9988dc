#!/usr/bin/env bash
# Builds the heapwatch image (deploy/Dockerfile, FROM scratch) with Debian's buildah and no
# registry, checks it, and says how big it is:
#   1. a statically linked release binary: the gnu target with +crt-static, no musl toolchain;
#      checked to have no program interpreter and no shared library;
#   2. `buildah build` of deploy/Dockerfile with a context holding only that binary, tagged
#      heapwatch:$VERSION (the tag deploy/daemonset.yaml names);
#   3. `heapwatch --version` run from the image: with `buildah run` when this machine can run
#      a container, else from the image's own root file system (buildah mount + chroot);
#   4. the image's size, and an OCI archive to import into a node's containerd without a
#      registry (`ctr -n k8s.io images import heapwatch-image.tar`).
# Installs buildah with apt when it is missing. Run as root.
# Settings: IMAGE=heapwatch:$VERSION OUT=target/heapwatch-image.tar
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
IMAGE=${IMAGE:-heapwatch:$VERSION}
OUT=${OUT:-$ROOT/target/heapwatch-image.tar}
TARGET=x86_64-unknown-linux-gnu
# vfs: works on any file system (overlay on overlay does not); the image is one small layer.
BUILDAH=(buildah --storage-driver vfs)

say() { echo "build-image: $*" >&2; }

if ! command -v buildah >/dev/null 2>&1; then
    say "installing buildah (Debian)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null
fi
buildah --version >&2

say "building the static binary"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --target "$TARGET"
BIN=$ROOT/target/$TARGET/release/heapwatch
# Static: no PT_INTERP (no dynamic loader asked for) and no DT_NEEDED (no shared library).
if readelf -lW "$BIN" | grep -q 'INTERP'; then
    say "$BIN asks for a dynamic loader: not static"; exit 1
fi
if readelf -dW "$BIN" 2>/dev/null | grep -q 'NEEDED'; then
    say "$BIN needs shared libraries: $(readelf -dW "$BIN" | grep NEEDED)"; exit 1
fi
say "static: $(file -b "$BIN" 2>/dev/null || echo "no PT_INTERP, no DT_NEEDED")"

CONTEXT=$(mktemp -d "${TMPDIR:-/tmp}/heapwatch-image.XXXXXX")
trap 'rm -rf "$CONTEXT"' EXIT
# The release profile keeps no debug info (Cargo.toml; `--profile symbols` has line tables);
# anything a toolchain leaves is stripped here too.
strip --strip-debug -o "$CONTEXT/heapwatch" "$BIN"

say "buildah build -t $IMAGE"
"${BUILDAH[@]}" build --quiet --layers=false -f "$ROOT/deploy/Dockerfile" -t "$IMAGE" "$CONTEXT" >/dev/null

CTR=$("${BUILDAH[@]}" from "$IMAGE")
cleanup_ctr() { "${BUILDAH[@]}" rm "$CTR" >/dev/null 2>&1 || true; rm -rf "$CONTEXT"; }
trap cleanup_ctr EXIT
if VERSION_OUT=$("${BUILDAH[@]}" run --isolation chroot "$CTR" -- /heapwatch --version 2>"$CONTEXT.err"); then
    HOW="buildah run --isolation chroot"
else
    say "buildah run failed ($(head -c 300 "$CONTEXT.err")); running from the image's root file system"
    MNT=$("${BUILDAH[@]}" mount "$CTR")
    VERSION_OUT=$(chroot "$MNT" /heapwatch --version)
    "${BUILDAH[@]}" umount "$CTR" >/dev/null
    HOW="buildah mount + chroot"
fi
rm -f "$CONTEXT.err"
expected="heapwatch $VERSION"
if [ "$VERSION_OUT" != "$expected" ]; then
    say "the image said '$VERSION_OUT', expected '$expected'"; exit 1
fi

rm -f "$OUT"
"${BUILDAH[@]}" push --quiet "$IMAGE" "oci-archive:$OUT:$IMAGE" >/dev/null
SIZE=$("${BUILDAH[@]}" images --format '{{.Size}}' "$IMAGE" | head -1)
echo "image:    $IMAGE ($SIZE; binary $(stat -c %s "$CONTEXT/heapwatch" 2>/dev/null || stat -c %s "$BIN") bytes)"
echo "version:  $VERSION_OUT (run with $HOW)"
echo "archive:  $OUT ($(stat -c %s "$OUT") bytes), for: ctr -n k8s.io images import $(basename "$OUT")"
