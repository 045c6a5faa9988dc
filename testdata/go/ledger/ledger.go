// Package ledger stands in for a module of the user's own that lies in
// another organisation than the main module (example.org against the main
// module's heapwatch.test), as a company's storage module beside a binary
// published under another path: its log runs on a goroutine it starts itself
// and keeps every record it reads through a third-party library
// (example.com/wal, not a codec). No frame of the main module is on the
// stack, and nothing tells heapwatch this module is the user's: it names the
// site by the library's frame until the user says, with --own example.org/,
// that this code is theirs; then by example.org/ledger.(*Log).replay.
package ledger

import "example.com/wal"

// Log keeps every record it has read: never compacted (the leak).
type Log struct {
	in      chan int
	records [][]byte
	bytes   int
	dec     wal.Decoder
}

// Start starts the log's goroutine.
func Start() *Log {
	l := &Log{in: make(chan int, 64)}
	go l.run()
	return l
}

// Append asks the log's goroutine to read and keep one record of size bytes.
func (l *Log) Append(size int) {
	l.in <- size
}

//go:noinline
func (l *Log) run() {
	for size := range l.in {
		l.replay(size)
	}
}

//go:noinline
func (l *Log) replay(size int) {
	rec := l.dec.Next(size)
	l.records = append(l.records, rec)
	l.bytes += len(rec)
}
