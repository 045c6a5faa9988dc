// Command tmpfsfile holds its memory in a file on tmpfs, not on its heap: it
// writes -size bytes to -file through main.writeFile with one small reused
// buffer, keeps the file open, and then idles. On tmpfs (a memory-backed
// emptyDir, /dev/shm) those pages are shared memory charged to its cgroup,
// which the kernel cannot drop; its Go heap stays a few MiB.
//
// With -heap it also keeps that many bytes on its heap while it writes, in
// main.migrate (a little per buffer written), as a controller migrating its
// database does beside the copy: a heap rise that does not fill the limit.
//
// It prints "written" once the file is complete.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	path   = flag.String("file", "", "the file to write and keep open (required; on tmpfs)")
	size   = fixture.BytesFlag("size", 64<<20, "bytes written")
	buffer = fixture.BytesFlag("buffer", 1<<20, "the one buffer reused for every write")
	pace   = flag.Duration("pace", 20*time.Millisecond, "pause after each buffer written")
	heap   = fixture.BytesFlag("heap", 0, "bytes kept on the heap in main.migrate while writing")
)

// migrated holds what main.migrate keeps.
var migrated [][]byte

// migrate keeps n more bytes on the heap.
//
//go:noinline
func migrate(n int) {
	b := make([]byte, n)
	fixture.Touch(b, byte(len(migrated)))
	migrated = append(migrated, b)
}

//go:noinline
func writeFile(f *os.File, buf []byte, total int64) error {
	perBuffer := int(int64(*heap) * int64(len(buf)) / max(total, 1))
	for done := int64(0); done < total; done += int64(len(buf)) {
		if perBuffer > 0 {
			migrate(perBuffer)
		}
		fixture.Touch(buf, byte(done>>20))
		if _, err := f.Write(buf); err != nil {
			return err
		}
		time.Sleep(*pace)
	}
	return nil
}

func main() {
	fixture.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "tmpfsfile: -file is required")
		os.Exit(2)
	}
	f, err := os.Create(*path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tmpfsfile: %v\n", err)
		os.Exit(1)
	}
	buf := make([]byte, int(*buffer))
	if err := writeFile(f, buf, int64(*size)); err != nil {
		fmt.Fprintf(os.Stderr, "tmpfsfile: write %s: %v\n", *path, err)
		os.Exit(1)
	}
	fmt.Println("written")
	// Idle with the file open (a sleep, not select{}: no other goroutine keeps the runtime
	// from calling that a deadlock).
	for {
		time.Sleep(time.Hour)
	}
}
