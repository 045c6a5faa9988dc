// Command replay is a server that dies replaying its own write-ahead log, the
// crash loop etcd and Prometheus fall into after an OOM kill: at start it
// reads records through a library of another module (example.com/wal, whose
// decoder allocates each one) and keeps every one in main.(*raftLog).replay at
// -rate bytes per second, until the kernel kills it; restarted, it does the
// same again. The leaf of every retained sample is the library's
// (*Decoder).readRecord; the cause, the main module's replay, is two frames up.
package main

import (
	"example.com/wal"
	"heapwatch.test/fixtures/internal/fixture"
)

var (
	rate    = fixture.BytesFlag("rate", 40<<20, "bytes per second of log replayed and kept")
	recSize = fixture.BytesFlag("record", 32<<10, "size of one record")
)

type raftLog struct {
	entries [][]byte
	bytes   int
}

//go:noinline
func (l *raftLog) replay(d *wal.Decoder, size int) {
	rec := d.Next(size)
	l.entries = append(l.entries, rec)
	l.bytes += len(rec)
}

var log raftLog

func main() {
	fixture.Parse()
	fixture.Serve()
	d := &wal.Decoder{}
	size := max(int(*recSize), 1)
	fixture.PaceConstant(int64(*rate), size, func(n int) {
		log.replay(d, n)
	})
}
