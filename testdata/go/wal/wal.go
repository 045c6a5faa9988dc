// Package wal stands in for a library a server replays its write-ahead log
// with (etcd's WAL over protobuf, Prometheus's WAL reader): a module of its
// own, not the server's, whose decoder allocates every record it returns. A
// site named by this leaf is one nobody in the server's team can change; the
// server's frame that keeps the records is the cause.
package wal

// Decoder hands out records of a fixed size, as a log read from disk would.
type Decoder struct {
	next byte
}

// Next returns the next record, freshly allocated.
//
//go:noinline
func (d *Decoder) Next(size int) []byte {
	return d.readRecord(size)
}

//go:noinline
func (d *Decoder) readRecord(size int) []byte {
	d.next++
	rec := make([]byte, size)
	// One byte a page, so the record is really backed.
	for i := 0; i < len(rec); i += 4096 {
		rec[i] = d.next
	}
	return rec
}
