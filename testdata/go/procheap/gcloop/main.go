// gcloop allocates one object at each of 16 sites, then runs a whole GC cycle, over and
// over, with every allocation sampled (MemProfileRate 1) and no other GC (GCPercent -1). So
// every state of the heap profile the runtime publishes (at a GC's end) counts the same
// allocations and the same frees at all 16 sites, and a capture that mixes the records from
// before and after a flush shows sites that disagree. heapwatch's proc captures of it must
// never disagree.
//
// Between the sites' buckets in the runtime's list lie 1,600 others (a hundred deep stacks
// after each site, made once), so the sites are read in different blocks, at different
// moments of a walk, as in a real profile of thousands of buckets, and a sweep's flush can
// fall between them. A million retained objects give each GC a sweep of thousands of spans
// between the cycle's start (when the counter moves) and the flush at the sweep's end, the
// window in which a flush can land inside a walk that sees no change of cycle.
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
)

const sites = 16

var (
	held    [sites][]byte
	padding [][]byte
	ballast [][]byte
)

// alloc allocates at one of 16 sites: a line, and so a stack, of its own each.
//
//go:noinline
func alloc(k int) []byte {
	switch k {
	case 0:
		return make([]byte, 64)
	case 1:
		return make([]byte, 64)
	case 2:
		return make([]byte, 64)
	case 3:
		return make([]byte, 64)
	case 4:
		return make([]byte, 64)
	case 5:
		return make([]byte, 64)
	case 6:
		return make([]byte, 64)
	case 7:
		return make([]byte, 64)
	case 8:
		return make([]byte, 64)
	case 9:
		return make([]byte, 64)
	case 10:
		return make([]byte, 64)
	case 11:
		return make([]byte, 64)
	case 12:
		return make([]byte, 64)
	case 13:
		return make([]byte, 64)
	case 14:
		return make([]byte, 64)
	case 15:
		return make([]byte, 64)
	}
	return nil
}

// pad makes a bucket of its own for each (k, d): d frames of deep under a line of its own.
//
//go:noinline
func pad(k, d int) {
	switch k {
	case 0:
		deep(d)
	case 1:
		deep(d)
	case 2:
		deep(d)
	case 3:
		deep(d)
	case 4:
		deep(d)
	case 5:
		deep(d)
	case 6:
		deep(d)
	case 7:
		deep(d)
	case 8:
		deep(d)
	case 9:
		deep(d)
	case 10:
		deep(d)
	case 11:
		deep(d)
	case 12:
		deep(d)
	case 13:
		deep(d)
	case 14:
		deep(d)
	case 15:
		deep(d)
	}
}

//go:noinline
func deep(d int) {
	if d > 0 {
		deep(d - 1)
		return
	}
	padding = append(padding, make([]byte, 16))
}

func main() {
	if len(os.Args) > 1 {
		// Never runs; keeps runtime.MemProfile reachable, or the linker turns profiling off.
		runtime.MemProfile(nil, true)
	}
	debug.SetGCPercent(-1)
	ballast = make([][]byte, 1<<20)
	for i := range ballast {
		ballast[i] = make([]byte, 64)
	}
	runtime.MemProfileRate = 1
	for i := 0; ; i++ {
		round(i == 0)
		runtime.GC()
		if i == 0 {
			fmt.Println("ready")
		}
	}
}

// round allocates once at every site; the first round also lays 100 padding buckets after
// each site's, so the sites' own buckets (made here, on this one path) lie apart.
//
//go:noinline
func round(first bool) {
	for k := 0; k < sites; k++ {
		held[k] = alloc(k)
		if first {
			for d := 0; d < 100; d++ {
				pad(k, d)
			}
		}
	}
}
