#!/usr/bin/env bash
# Regenerates the example flamegraphs in this folder from the recorded runs and captured
# profiles under testdata/ (see testdata/runs/README.md). The output is deterministic: the same
# recordings give the same bytes, so a diff of this folder shows only real changes.
#
#   flamegraphs/render-examples.sh                 # builds heapwatch (release) first
#   HEAPWATCH=target/debug/heapwatch flamegraphs/render-examples.sh
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/flamegraphs"
cd "$repo"

if [[ -z "${HEAPWATCH:-}" ]]; then
    cargo build --quiet --release --bin heapwatch
    HEAPWATCH="$(cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')/release/heapwatch"
fi

flame() {
    local name="$1"
    shift
    "$HEAPWATCH" flame "$@" -o "$out/$name.svg"
}

# Two builds of the controller doing the same work: what 2.1.0 holds that 2.0.2 does not
# (red), and what it holds less of (blue), at the same time since start.
flame controller-2.1.0-vs-2.0.2 testdata/runs/controller-2.1.0 --diff testdata/runs/controller-2.0.2

# What the last boot cycle of an OOM-looping target added before the kernel killed it.
flame oomgrow-growth testdata/runs/oomgrow --growth

# A slow leak under a big, stable heap: what was added over 12 s.
flame hiddenleak-growth testdata/runs/hiddenleak --growth

# Where the goroutines of a goroutine leak are parked.
flame goroutineleak-goroutines testdata/profiles/goroutineleak-goroutine.pb.gz
