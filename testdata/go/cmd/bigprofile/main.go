// Command bigprofile makes one very large heap profile, for benchmarks: it
// sets runtime.MemProfileRate = 1 (every allocation sampled) and keeps alive
// small objects allocated under tens of thousands of distinct call stacks.
//
// With -o it runs the GC twice, writes the heap profile (gzipped protobuf) to
// that path and exits. With -listen it is a live target instead: it serves
// net/http/pprof on that address (port 0 picks a free one; the line
// "listening on HOST:PORT" on stdout names the real one), keeps the stacks
// alive for good, and allocates and drops -churn bytes per second in
// main.churnBuffer so that the GC runs and the served profile keeps changing.
//
// Each stack is a depth-12 descent through four distinct functions
// (main.branchA .. main.branchD), chosen at each level by two bits of a
// scrambled index, ending in main.allocLeaf.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"heapwatch.test/fixtures/internal/fixture"
)

const depth = 12

var (
	out    = flag.String("o", "", "path of the heap profile to write (this or -listen is required)")
	stacks = flag.Int("stacks", 150000, "number of distinct allocation stacks (at most 4^12)")
	churn  = fixture.BytesFlag("churn", 8<<20, "with -listen: bytes per second allocated and dropped in main.churnBuffer (0: none)")
)

type leafObject struct {
	index int64
	path  uint64
	pad   [16]byte
}

var (
	live      []*leafObject
	churnSink []byte
)

// scramble is a bijection on [0, 4^12): consecutive indexes get unrelated
// paths, so that every level of the descent varies.
func scramble(i int) uint64 {
	const mask = 1<<(2*depth) - 1
	return (uint64(i) * 0x9E3779B1) & mask
}

func descend(level int, path uint64, i int) {
	if level == depth {
		allocLeaf(path, i)
		return
	}
	switch (path >> (2 * level)) & 3 {
	case 0:
		branchA(level+1, path, i)
	case 1:
		branchB(level+1, path, i)
	case 2:
		branchC(level+1, path, i)
	default:
		branchD(level+1, path, i)
	}
}

//go:noinline
func branchA(level int, path uint64, i int) { descend(level, path, i) }

//go:noinline
func branchB(level int, path uint64, i int) { descend(level, path, i) }

//go:noinline
func branchC(level int, path uint64, i int) { descend(level, path, i) }

//go:noinline
func branchD(level int, path uint64, i int) { descend(level, path, i) }

//go:noinline
func allocLeaf(path uint64, i int) {
	live[i] = &leafObject{index: int64(i), path: path}
}

// churnBuffer allocates a buffer and drops it at the next call.
//
//go:noinline
func churnBuffer(size int) {
	b := make([]byte, size)
	fixture.Touch(b, byte(size))
	churnSink = b
}

// listening reports whether -listen was given on the command line (the flag
// itself belongs to package fixture and has a default).
func listening() bool {
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "listen" {
			set = true
		}
	})
	return set
}

func main() {
	runtime.MemProfileRate = 1
	fixture.Parse()
	serve := listening()
	// Exactly one of -o and -listen.
	if (*out != "") == serve || *stacks <= 0 || *stacks > 1<<(2*depth) {
		fmt.Fprintln(os.Stderr, "usage: bigprofile -o PATH [-stacks N]")
		fmt.Fprintln(os.Stderr, "       bigprofile -listen ADDR [-stacks N] [-churn BYTES_PER_SEC]")
		os.Exit(2)
	}
	live = make([]*leafObject, *stacks)
	for i := range live {
		descend(0, scramble(i), i)
	}
	runtime.GC()
	runtime.GC()
	if serve {
		fixture.Serve()
		if *churn > 0 {
			fixture.PaceConstant(int64(*churn), 64<<10, churnBuffer)
		}
		fixture.Forever()
	}
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runtime.KeepAlive(live)
}
