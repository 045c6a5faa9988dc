// Command controller models an OpenZiti controller upgrade, 2.0.2 -> 2.1.0,
// as one program built twice: plain `go build` gives the good "2.0.2" build
// (good.go), `go build -tags regressed` the "2.1.0" build (regressed.go).
//
// Both builds do the same work: a stable data model held by
// main.(*routerDataModel).load, per-request churn in
// main.(*raftReadOnly).serveRead, and a stream of events built by
// main.(*routerDataModel).buildEventList. The good build keeps only the
// newest ~2 MiB of events; the regressed one keeps them all (~24 MiB/s), and
// also retains a peer log in main.(*raftReadOnly).replayPeerLog (~4 MiB/s),
// a site that exists only in that build.
//
// stdout: "listening on HOST:PORT", then "version 2.0.2" (or 2.1.0).
package main

import (
	"flag"
	"fmt"
	"sync"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	modelSize  = fixture.BytesFlag("model", 24<<20, "bytes held for good by main.(*routerDataModel).load")
	rate       = fixture.BytesFlag("rate", 24<<20, "bytes per second of events built by main.(*routerDataModel).buildEventList")
	replayRate = fixture.BytesFlag("replay-rate", 4<<20, "bytes per second retained by main.(*raftReadOnly).replayPeerLog (regressed build only)")
	churn      = fixture.BytesFlag("churn", 16<<20, "bytes per second of short-lived allocation in main.(*raftReadOnly).serveRead")
	delay      = flag.Duration("delay", 0, "sleep this long after loading the data model, before events and reads start (the migration phase)")
)

const (
	eventSize   = 64 << 10
	readSize    = 8 << 10
	replaySize  = 32 << 10
	keptEvents  = (2 << 20) / eventSize // good build: newest 2 MiB of events
	modelRecord = 64 << 10
)

type routerDataModel struct {
	mu      sync.Mutex
	routers [][]byte
	events  [][]byte
	seq     int
}

type raftReadOnly struct {
	mu      sync.Mutex
	peerLog [][]byte // used by the regressed build only
	reads   int
}

var (
	model routerDataModel
	raft  raftReadOnly
	sink  = make([][]byte, 64)
)

//go:noinline
func (m *routerDataModel) load(total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.routers = make([][]byte, 0, total/modelRecord)
	for i := 0; i < total/modelRecord; i++ {
		b := make([]byte, modelRecord)
		fixture.Touch(b, byte(i))
		m.routers = append(m.routers, b)
	}
}

//go:noinline
func (r *raftReadOnly) serveRead(size int) uint64 {
	r.mu.Lock()
	r.reads++
	n := r.reads
	r.mu.Unlock()
	resp := make([]byte, size)
	fixture.Touch(resp, byte(n))
	sink[n%len(sink)] = resp
	return fixture.Checksum(resp)
}

func main() {
	fixture.Parse()
	fixture.Serve()
	fmt.Printf("version %s\n", buildVersion)
	model.load(int(*modelSize))
	time.Sleep(*delay)
	go fixture.PaceConstant(int64(*churn), readSize, func(size int) { raft.serveRead(size) })
	startRegressedWork()
	fixture.PaceConstant(int64(*rate), eventSize, model.buildEventList)
}
