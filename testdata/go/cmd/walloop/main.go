// Command walloop is a store that logs every write to a write-ahead log and
// replays that log at every start, the crash loop etcd and Prometheus fall
// into once the log holds more than memory can: run it again and again with
// the same -wal file (as `heapwatch run --restarts N` does) and
//
//   - life 1 (an empty log): main.(*kvStore).apply keeps every entry it is
//     given (-rate bytes per second of -entry bytes each, from the start) and
//     appends it to the log file, fsync'ed every 4 MiB, until the kernel
//     kills it at its memory limit;
//   - every later life: main.(*kvStore).replayWAL reads the log back from the
//     start at -replay-rate bytes of log per second (decoding costs time) and
//     keeps each record twice, its raw frame and its decoded entry (the
//     decoder's entries point into its read buffers, so the buffers stay
//     reachable): 2 × -replay-rate of heap from the first moment, until the
//     kernel kills it in the replay, long before the log is read. The log
//     never grows again; the loop does not end by itself.
//
// Truth, per life: the site (leaf and own frame alike) is main.(*kvStore).apply
// in life 1 and main.(*kvStore).replayWAL in every later one; both rise from
// the start (onset within the first second) and are OOM-killed while still
// climbing.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	walPath    = flag.String("wal", "", "the write-ahead log file (created when missing, replayed when not)")
	rate       = fixture.BytesFlag("rate", 32<<20, "bytes per second of entries applied and logged")
	entrySize  = fixture.BytesFlag("entry", 64<<10, "size of one entry")
	replayRate = fixture.BytesFlag("replay-rate", 24<<20, "bytes of log replayed per second")
)

const (
	syncEvery = 4 << 20  // appended to the log between two fsyncs
	maxEntry  = 64 << 20 // a larger frame length is a torn header
)

type kvStore struct {
	entries [][]byte
	frames  [][]byte // replay only: the raw frames the entries were read from
	logged  int
	wal     *os.File
}

// apply keeps one entry and appends it to the log as a frame: a 4-byte
// little-endian length, then the entry.
//
//go:noinline
func (s *kvStore) apply(seq int, payload []byte) error {
	e := make([]byte, len(payload))
	copy(e, payload)
	fixture.Touch(e, byte(seq))
	s.entries = append(s.entries, e)
	var head [4]byte
	binary.LittleEndian.PutUint32(head[:], uint32(len(e)))
	if _, err := s.wal.Write(head[:]); err != nil {
		return err
	}
	if _, err := s.wal.Write(e); err != nil {
		return err
	}
	s.logged += len(e) + len(head)
	if s.logged >= syncEvery {
		s.logged = 0
		return s.wal.Sync()
	}
	return nil
}

// replayWAL reads every frame of the log and keeps it with its decoded entry,
// paced to bytesPerSec of log; it returns how many frames it read and the
// offset just past the last whole one (a frame torn by the kill that ended
// the life that wrote it ends the log).
//
//go:noinline
func (s *kvStore) replayWAL(r io.Reader, bytesPerSec int64) (int, int64) {
	br := bufio.NewReaderSize(r, 256<<10)
	start := time.Now()
	var done int64
	n := 0
	for {
		var head [4]byte
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return n, done
		}
		size := int(binary.LittleEndian.Uint32(head[:]))
		if size > maxEntry {
			return n, done
		}
		frame := make([]byte, size)
		if _, err := io.ReadFull(br, frame); err != nil {
			return n, done
		}
		entry := make([]byte, size)
		copy(entry, frame)
		fixture.Touch(frame, byte(n))
		s.frames = append(s.frames, frame)
		s.entries = append(s.entries, entry)
		n++
		done += int64(size + len(head))
		due := start.Add(time.Duration(float64(done) / float64(bytesPerSec) * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
	}
}

var store kvStore

func main() {
	fixture.Parse()
	if *walPath == "" {
		fmt.Fprintln(os.Stderr, "walloop: -wal FILE is required")
		os.Exit(2)
	}
	fixture.Serve()
	f, err := os.OpenFile(*walPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "walloop:", err)
		os.Exit(1)
	}
	n, end := store.replayWAL(f, int64(*replayRate))
	fmt.Fprintf(os.Stderr, "walloop: replayed %d entries, serving\n", n)
	// Appends go after the last whole frame: a torn one is cut off.
	if err := f.Truncate(end); err != nil {
		fmt.Fprintln(os.Stderr, "walloop:", err)
		os.Exit(1)
	}
	if _, err := f.Seek(end, io.SeekStart); err != nil {
		fmt.Fprintln(os.Stderr, "walloop:", err)
		os.Exit(1)
	}
	store.wal = f
	size := max(int(*entrySize), 1)
	payload := make([]byte, size)
	seq := 0
	fixture.PaceConstant(int64(*rate), size, func(int) {
		seq++
		payload[0] = byte(seq)
		if err := store.apply(seq, payload); err != nil {
			fmt.Fprintln(os.Stderr, "walloop: append:", err)
			os.Exit(1)
		}
	})
}
