// procheap builds a known heap across a few allocation sites (one inlined, one generic, one
// deep and recursive), publishes it with two GCs, turns the GC off so the published profile
// stays frozen, then serves net/http/pprof on a loopback port and waits. heapwatch's proc
// source must read the same profile out of its memory that /debug/pprof/heap serves.
package main

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
)

type node struct {
	next    *node
	payload [48]byte
}

var (
	keepSmall [][]byte
	keepLarge [][]byte
	keepNodes *node
	keepInts  [][]int
	keepDeep  [][]byte
	keepNew   [][]byte
	sink      []byte
	sinkCount int
)

// newNode is small enough to be inlined into buildList: its allocation site is an inlined
// frame.
func newNode(next *node) *node {
	return &node{next: next}
}

//go:noinline
func buildList(n int) {
	for i := 0; i < n; i++ {
		keepNodes = newNode(keepNodes)
	}
}

//go:noinline
func retainSmall(n int) {
	for i := 0; i < n; i++ {
		keepSmall = append(keepSmall, make([]byte, 1024))
	}
}

//go:noinline
func retainLarge(n int) {
	for i := 0; i < n; i++ {
		keepLarge = append(keepLarge, make([]byte, 1<<20))
	}
}

// makeSlice is generic: its symbol carries a shape, as pprof names it.
//
//go:noinline
func makeSlice[T any](n int) []T {
	return make([]T, n)
}

//go:noinline
func retainGeneric(n int) {
	for i := 0; i < n; i++ {
		keepInts = append(keepInts, makeSlice[int](256))
	}
}

//go:noinline
func deep(depth int) {
	if depth > 0 {
		deep(depth - 1)
		return
	}
	keepDeep = append(keepDeep, make([]byte, 8192))
}

//go:noinline
func churn(n int) {
	for i := 0; i < n; i++ {
		sink = make([]byte, 4096)
		sinkCount += len(sink)
	}
	sink = nil
}

//go:noinline
func recentSite(n int) {
	for i := 0; i < n; i++ {
		keepNew = append(keepNew, make([]byte, 512))
	}
}

func main() {
	// Every site must be sampled for sure (the default 512 KiB rate could miss the small
	// ones), and the rate must not be 1, so that the profile's scaling is exercised.
	runtime.MemProfileRate = 64 << 10
	// The first sample on each P is still drawn at the old 512 KiB rate, and may land a few
	// MiB in: the first site allocates ~11 MiB so that draw never skips it.
	buildList(200000)
	retainSmall(3000)
	retainLarge(6)
	retainGeneric(2000)
	for i := 0; i < 200; i++ {
		deep(40)
	}
	churn(20000)
	runtime.GC()
	runtime.GC()
	debug.SetGCPercent(-1)
	recentSite(20000)
	http.HandleFunc("/publish", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		runtime.GC()
		fmt.Fprintln(w, "published")
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	if err := http.Serve(ln, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
