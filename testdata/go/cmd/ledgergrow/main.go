// Command ledgergrow leaks in a module of the user's own organisation that is
// not the main module's (example.org/ledger), on a goroutine that module
// started, through a third-party library's decoder (example.com/wal): -rate
// bytes per second of -record bytes each, kept until the kernel kills the
// process.
//
// Truth: the leaf of every retained sample is example.com/wal's
// (*Decoder).readRecord; the stack holds no frame of the main module. Without
// --own, heapwatch names the site by the library's frame; with --own
// example.org/ (the user's word), by example.org/ledger.(*Log).replay.
package main

import (
	"example.org/ledger"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	rate    = fixture.BytesFlag("rate", 16<<20, "bytes per second read and kept by the ledger")
	recSize = fixture.BytesFlag("record", 64<<10, "size of one record")
)

func main() {
	fixture.Parse()
	fixture.Serve()
	l := ledger.Start()
	size := max(int(*recSize), 1)
	fixture.PaceConstant(int64(*rate), size, func(n int) {
		l.Append(n)
	})
}
