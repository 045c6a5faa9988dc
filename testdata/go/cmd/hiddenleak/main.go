// Command hiddenleak hides a slow leak under a large stable heap:
// main.loadCatalog holds ~96 MiB from start, while
// main.(*sessionTable).remember appends session records that are never
// pruned (~1 MiB/s). main.serveLookup churns short-lived buffers (which also
// keeps the GC, and so the in-use figures of the heap profile, moving); part
// of that churn is in the inlined helper main.formatKey.
package main

import (
	"sync"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	catalogSize = fixture.BytesFlag("catalog", 96<<20, "bytes held for good by main.loadCatalog")
	rate        = fixture.BytesFlag("rate", 1<<20, "leak rate in bytes per second (main.(*sessionTable).remember)")
	churn       = fixture.BytesFlag("churn", 128<<20, "bytes per second of short-lived allocation in main.serveLookup")
)

const (
	catalogChunk = 64 << 10
	recordSize   = 2 << 10 // payload of one session record
)

type sessionRecord struct {
	id      uint64
	created int64
	payload []byte
}

type sessionTable struct {
	mu      sync.Mutex
	nextID  uint64
	records []*sessionRecord // appended to, never pruned: the leak
}

var (
	catalog  [][]byte
	sessions sessionTable
	sink     = make([][]byte, 64)
	sinkKey  = make([][]byte, 64)
)

//go:noinline
func loadCatalog(total int) [][]byte {
	n := total / catalogChunk
	c := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		b := make([]byte, catalogChunk)
		fixture.Touch(b, byte(i))
		c = append(c, b)
	}
	return c
}

//go:noinline
func (t *sessionTable) remember(size int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextID++
	r := &sessionRecord{id: t.nextID, created: time.Now().UnixNano(), payload: make([]byte, size)}
	fixture.Touch(r.payload, byte(t.nextID))
	t.records = append(t.records, r)
}

// formatKey is small enough to be inlined into serveLookup: its allocation
// shows in profiles as an inlined frame.
func formatKey(n int, seed byte) []byte {
	k := make([]byte, n)
	k[0] = seed
	return k
}

//go:noinline
func serveLookup(i, size int) uint64 {
	resp := make([]byte, size)
	fixture.Touch(resp, byte(i))
	key := formatKey(size/8, byte(i))
	sink[i%len(sink)] = resp
	sinkKey[i%len(sinkKey)] = key
	return fixture.Checksum(resp) + uint64(key[0])
}

func main() {
	fixture.Parse()
	fixture.Serve()
	catalog = loadCatalog(int(*catalogSize))
	go fixture.PaceConstant(int64(*rate), recordSize, sessions.remember)
	i := 0
	// Mixed sizes, so that the profile has a few buckets per site.
	sizes := []int{8 << 10, 16 << 10, 24 << 10, 32 << 10}
	// One call allocates 20 KiB on average in serveLookup plus 1/8 of that in
	// formatKey.
	go fixture.PaceConstant(int64(*churn), 20<<10*9/8, func(int) {
		i++
		serveLookup(i, sizes[i%len(sizes)])
	})
	fixture.Forever()
}
