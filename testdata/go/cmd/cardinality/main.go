// Command cardinality is a time-series head under label churn (pods that come
// and go, each a new series): every sample names a series never seen before,
// and main.(*head).newSeries builds it from four allocation sites, each a leaf
// of its own, and keeps it for good:
//
//	main.(*labelsBuilder).labels  1.5 KiB  the series' label set
//	main.newXORChunk              1.5 KiB  its first chunk
//	main.(*encbuf).putString      1 KiB    its symbols
//	main.newMemSeries             1 KiB    the series itself
//
// (5 KiB a series, at -rate bytes per second from -idle after start), while
// main.(*scrapeLoop).parse allocates and drops -churn bytes per second, as a
// scraper does, from the start. With -for it exits 0 after that long.
//
// Truth: one cause, main.(*head).newSeries, holds all of the rise (each leaf
// 20–30 % of it); rate -rate from -idle.
package main

import (
	"flag"
	"os"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	rate   = fixture.BytesFlag("rate", 16<<20, "bytes per second of new series kept (main.(*head).newSeries)")
	churn  = fixture.BytesFlag("churn", 32<<20, "bytes per second allocated and dropped in main.(*scrapeLoop).parse")
	idle   = flag.Duration("idle", 0, "quiet time before the churn of series starts")
	runFor = flag.Duration("for", 0, "exit 0 after this long (0: never)")
)

const (
	labelsSize = 1536
	chunkSize  = 1536
	symbolSize = 1024
	seriesSize = 1024
	perSeries  = labelsSize + chunkSize + symbolSize + seriesSize
)

type labels []byte

type xorChunk struct{ b []byte }

type memSeries struct {
	ref   uint64
	lset  labels
	chunk *xorChunk
	state [seriesSize - 48]byte // head-chunk bookkeeping, pending appends
}

type labelsBuilder struct{}

//go:noinline
func (b *labelsBuilder) labels(ref uint64) labels {
	l := make(labels, labelsSize)
	fixture.Touch(l, byte(ref))
	return l
}

//go:noinline
func newXORChunk() *xorChunk {
	c := &xorChunk{b: make([]byte, chunkSize)}
	c.b[0] = 1
	return c
}

type encbuf struct{ symbols [][]byte }

//go:noinline
func (e *encbuf) putString(ref uint64) {
	s := make([]byte, symbolSize)
	s[0] = byte(ref)
	e.symbols = append(e.symbols, s)
}

//go:noinline
func newMemSeries(ref uint64, l labels) *memSeries {
	return &memSeries{ref: ref, lset: l}
}

type head struct {
	lb      labelsBuilder
	symbols encbuf
	series  []*memSeries
	next    uint64
}

// newSeries is the one caller under which every kept byte is allocated.
//
//go:noinline
func (h *head) newSeries() *memSeries {
	h.next++
	l := h.lb.labels(h.next)
	h.symbols.putString(h.next)
	s := newMemSeries(h.next, l)
	s.chunk = newXORChunk()
	h.series = append(h.series, s)
	return s
}

//go:noinline
func (h *head) getOrCreate() *memSeries {
	// Every label set is new: there is nothing to look up.
	return h.newSeries()
}

type scrapeLoop struct{ sum uint64 }

//go:noinline
func (s *scrapeLoop) parse(size int) {
	buf := make([]byte, size)
	fixture.Touch(buf, byte(size))
	s.sum += fixture.Checksum(buf)
}

var (
	h      head
	scrape scrapeLoop
)

func main() {
	fixture.Parse()
	fixture.Serve()
	if *runFor > 0 {
		time.AfterFunc(*runFor, func() { os.Exit(0) })
	}
	if *churn > 0 {
		go fixture.PaceConstant(int64(*churn), 64<<10, scrape.parse)
	}
	time.Sleep(*idle)
	fixture.PaceConstant(int64(*rate), perSeries, func(int) {
		h.getOrCreate()
	})
}
