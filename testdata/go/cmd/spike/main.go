// Command spike builds a large index in one site during start-up, then drops
// it: main.buildStartupIndex holds ~150 MiB (-spike) for -hold, from -rise
// after start, and frees it all. main.loadSettings holds ~4 MiB for good and
// main.serveRequest churns a little, so the heap before and after the spike is
// small and flat. A transient episode, not sustained growth. With -exit-after
// it exits by itself, as a controller does when a restart is required.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	spikeSize   = fixture.BytesFlag("spike", 150<<20, "bytes held by main.buildStartupIndex during the spike")
	settings    = fixture.BytesFlag("settings", 4<<20, "bytes held for good by main.loadSettings")
	rise        = flag.Duration("rise", 2*time.Second, "when the index starts being built, after program start")
	build       = flag.Duration("build", 2*time.Second, "how long building the index takes")
	hold        = flag.Duration("hold", 2*time.Second, "how long the built index is held before it is dropped")
	listenAfter = flag.Duration("listen-after", 0, "load the settings, then wait this long before the pprof endpoint opens (a migration before the agent starts)")
	exitAfter   = flag.Duration("exit-after", 0, "if > 0, exit by itself (status 0) this long after start, as a controller does after restoring a snapshot")
)

const chunk = 256 << 10

var (
	kept  [][]byte
	index [][]byte
	sink  = make([][]byte, 32)
)

//go:noinline
func loadSettings(total int) [][]byte {
	r := make([][]byte, 0, total/chunk)
	for i := 0; i < total/chunk; i++ {
		b := make([]byte, chunk)
		fixture.Touch(b, byte(i))
		r = append(r, b)
	}
	return r
}

// buildStartupIndex adds one chunk to the start-up index.
//
//go:noinline
func buildStartupIndex(i int) {
	b := make([]byte, chunk)
	fixture.Touch(b, byte(i))
	index = append(index, b)
}

//go:noinline
func serveRequest(i int) {
	b := make([]byte, 4<<10)
	b[0] = byte(i)
	sink[i%len(sink)] = b
}

func main() {
	start := time.Now()
	fixture.Parse()
	kept = loadSettings(int(*settings))
	time.Sleep(*listenAfter)
	fixture.Serve()
	if *exitAfter > 0 {
		go func() {
			time.Sleep(time.Until(start.Add(*exitAfter)))
			fmt.Fprintln(os.Stderr, "restart required, exiting")
			os.Exit(0)
		}()
	}
	go func() {
		for i := 0; ; i++ {
			serveRequest(i)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(time.Until(start.Add(*rise)))
	n := int(*spikeSize) / chunk
	step := *build / time.Duration(n)
	for i := 0; i < n; i++ {
		buildStartupIndex(i)
		time.Sleep(step)
	}
	// A GC publishes the heap profile (the in-use figures of the GC before):
	// two, as a busy service's own allocation would run, make the built index
	// visible while it is held.
	runtime.GC()
	runtime.GC()
	time.Sleep(*hold)
	index = nil
	for {
		runtime.GC()
		time.Sleep(300 * time.Millisecond)
	}
}
