// Command bigprofile writes one very large heap profile, for benchmarks: it
// sets runtime.MemProfileRate = 1 (every allocation sampled), keeps alive
// small objects allocated under tens of thousands of distinct call stacks,
// runs the GC twice and writes the heap profile (gzipped protobuf) to -o.
// It is not a server and exits when done.
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
)

const depth = 12

var (
	out    = flag.String("o", "", "path of the heap profile to write (required)")
	stacks = flag.Int("stacks", 150000, "number of distinct allocation stacks (at most 4^12)")
)

type leafObject struct {
	index int64
	path  uint64
	pad   [16]byte
}

var live []*leafObject

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

func main() {
	runtime.MemProfileRate = 1
	flag.Parse()
	if *out == "" || *stacks <= 0 || *stacks > 1<<(2*depth) {
		fmt.Fprintln(os.Stderr, "usage: bigprofile -o PATH [-stacks N]")
		os.Exit(2)
	}
	live = make([]*leafObject, *stacks)
	for i := range live {
		descend(0, scramble(i), i)
	}
	runtime.GC()
	runtime.GC()
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
