// Command storm has a transient allocation storm and flat in-use memory:
// main.loadRoutes holds ~8 MiB for good, main.handlePing churns a little, and
// main.encodeSnapshot allocates and drops ~1 MiB/s, except between
// -storm-start and -storm-end after start, when it allocates and drops
// ~200 MiB/s. Only the alloc_* figures show the storm.
package main

import (
	"flag"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	routesSize = fixture.BytesFlag("routes", 8<<20, "bytes held for good by main.loadRoutes")
	pingRate   = fixture.BytesFlag("ping-rate", 2<<20, "bytes per second of short-lived allocation in main.handlePing")
	baseRate   = fixture.BytesFlag("rate", 1<<20, "bytes per second in main.encodeSnapshot outside the storm")
	stormRate  = fixture.BytesFlag("storm-rate", 200<<20, "bytes per second in main.encodeSnapshot during the storm")
	stormStart = flag.Duration("storm-start", 3*time.Second, "start of the storm, after program start")
	stormEnd   = flag.Duration("storm-end", 6*time.Second, "end of the storm, after program start")
)

const (
	snapshotChunk = 256 << 10
	pingSize      = 2 << 10
)

var (
	routes    [][]byte
	sinkPing  = make([][]byte, 64)
	checksums uint64
)

//go:noinline
func loadRoutes(total int) [][]byte {
	const c = 32 << 10
	r := make([][]byte, 0, total/c)
	for i := 0; i < total/c; i++ {
		b := make([]byte, c)
		fixture.Touch(b, byte(i))
		r = append(r, b)
	}
	return r
}

//go:noinline
func handlePing(i, size int) {
	b := make([]byte, size)
	b[0] = byte(i)
	sinkPing[i%len(sinkPing)] = b
}

// encodeSnapshot builds a snapshot buffer, "sends" it (checksums it) and
// drops it at once.
//
//go:noinline
func encodeSnapshot(size int) uint64 {
	buf := make([]byte, size)
	fixture.Touch(buf, byte(size))
	return fixture.Checksum(buf)
}

func main() {
	start := time.Now()
	fixture.Parse()
	fixture.Serve()
	routes = loadRoutes(int(*routesSize))
	i := 0
	go fixture.PaceConstant(int64(*pingRate), pingSize, func(size int) {
		i++
		handlePing(i, size)
	})
	// The storm window is measured from program start, not from here.
	offset := time.Since(start)
	fixture.Pace(func(elapsed time.Duration) int64 {
		if t := elapsed + offset; t >= *stormStart && t < *stormEnd {
			return int64(*stormRate)
		}
		return int64(*baseRate)
	}, snapshotChunk, func(size int) {
		checksums += encodeSnapshot(size)
	})
}
