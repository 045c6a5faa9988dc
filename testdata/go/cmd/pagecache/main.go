// Command pagecache fills its memory cgroup with page cache, not heap: it writes
// a -size file through main.writeFile with one small reused buffer, then rereads
// it through main.rereadFile in a loop, forever. Its Go heap
// stays a few MiB; in a cgroup smaller than the file, usage sits at the limit on
// reclaimable cache and the kernel reclaims it instead of killing anything.
//
// It prints "listening on HOST:PORT" (net/http/pprof), then "written" once the
// file is complete.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	path   = flag.String("file", "", "the file to write and reread (required; on a disk, not tmpfs)")
	size   = fixture.BytesFlag("size", 400<<20, "bytes written")
	buffer = fixture.BytesFlag("buffer", 1<<20, "the one buffer reused for every write and read")
)

//go:noinline
func writeFile(f *os.File, buf []byte, total int64) error {
	for done := int64(0); done < total; done += int64(len(buf)) {
		fixture.Touch(buf, byte(done>>20))
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Sync()
}

//go:noinline
func rereadFile(f *os.File, buf []byte) (uint64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	var sum uint64
	for {
		n, err := f.Read(buf)
		sum += fixture.Checksum(buf[:n])
		if err == io.EOF {
			return sum, nil
		}
		if err != nil {
			return sum, err
		}
	}
}

func main() {
	fixture.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "pagecache: -file is required")
		os.Exit(2)
	}
	fixture.Serve()
	f, err := os.Create(*path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pagecache: %v\n", err)
		os.Exit(1)
	}
	buf := make([]byte, int(*buffer))
	if err := writeFile(f, buf, int64(*size)); err != nil {
		fmt.Fprintf(os.Stderr, "pagecache: write %s: %v\n", *path, err)
		os.Exit(1)
	}
	fmt.Println("written")
	for {
		if _, err := rereadFile(f, buf); err != nil {
			fmt.Fprintf(os.Stderr, "pagecache: reread %s: %v\n", *path, err)
			os.Exit(1)
		}
	}
}
