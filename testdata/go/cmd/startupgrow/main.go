// Command startupgrow never opens an endpoint: it spends its whole life in a
// start-up function, main.migrateDatastore, which retains every record it
// builds (~64 MiB/s by default, in chunks of 256 KiB, each page written so
// that RSS really grows) until the kernel kills it. Only a source that reads
// the process from outside (proc:) can see where its memory goes.
package main

import (
	"fmt"
	"os"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	rate  = fixture.BytesFlag("rate", 64<<20, "growth in bytes per second (main.migrateDatastore)")
	chunk = fixture.BytesFlag("chunk", 256<<10, "size of one retained record")
)

// migrated holds every record: nothing is ever released.
var migrated [][]byte

//go:noinline
func migrateDatastore(bytesPerSec int64, size int) {
	start := time.Now()
	var done int64
	for seq := 0; ; seq++ {
		record := make([]byte, size)
		fixture.Touch(record, byte(seq))
		migrated = append(migrated, record)
		done += int64(size)
		// Keep to the rate: sleep until the bytes allocated so far are due.
		due := start.Add(time.Duration(float64(done) / float64(bytesPerSec) * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
	}
}

func main() {
	fixture.Parse()
	fmt.Fprintf(os.Stderr, "startupgrow: pid %d migrating\n", os.Getpid())
	migrateDatastore(int64(*rate), max(int(*chunk), 1))
}
