// Command steady is a well-behaved service: a constant working set built at
// start by main.loadConfigIndex, and a constant churn of short-lived request
// buffers in main.handleRequest (part of it in the inlined helper
// main.copyBody). In-use memory stays flat; only alloc_* grows.
package main

import (
	"flag"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	workingSet = fixture.BytesFlag("working-set", 16<<20, "bytes held for good by main.loadConfigIndex")
	rate       = fixture.BytesFlag("rate", 32<<20, "bytes per second of short-lived allocation in main.handleRequest")
	workers    = flag.Int("workers", 4, "request-handling goroutines sharing -rate")
)

const (
	indexChunk  = 64 << 10
	requestSize = 4 << 10
)

// configIndex is the working set: kept for the life of the process.
var configIndex [][]byte

// sink keeps the compiler from proving request buffers dead.
var sink [][]byte = make([][]byte, 64)

//go:noinline
func loadConfigIndex(total int) [][]byte {
	n := total / indexChunk
	idx := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		b := make([]byte, indexChunk)
		fixture.Touch(b, byte(i))
		idx = append(idx, b)
	}
	return idx
}

// copyBody is small enough to be inlined into handleRequest: its allocation
// shows in profiles as an inlined frame "main.copyBody" under
// main.handleRequest.
func copyBody(b []byte) []byte {
	out := make([]byte, len(b)/2)
	copy(out, b)
	return out
}

//go:noinline
func handleRequest(worker, size int) uint64 {
	req := make([]byte, size)
	fixture.Touch(req, byte(worker))
	body := copyBody(req)
	sink[worker%len(sink)] = body
	return fixture.Checksum(req) + fixture.Checksum(body)
}

func main() {
	fixture.Parse()
	fixture.Serve()
	configIndex = loadConfigIndex(int(*workingSet))
	n := max(*workers, 1)
	per := int64(*rate) / int64(n)
	for w := 0; w < n; w++ {
		go fixture.PaceConstant(per, requestSize*3/2, func(int) {
			// Each call allocates requestSize in handleRequest plus
			// requestSize/2 in copyBody.
			handleRequest(w, requestSize)
		})
	}
	fixture.Forever()
}
