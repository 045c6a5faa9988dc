// Command raftgrow leaks through a module of its own organisation on a
// goroutine that module started: main proposes -rate bytes per second of
// entries (wrapperspb.BytesValue of -entry bytes each, dropped once proposed)
// to a heapwatch.test/raftlike node, whose goroutine keeps a proto.Clone of
// every one until the kernel kills the process.
//
// Truth: the site to act on is heapwatch.test/raftlike.(*raft).appendEntry
// (the first frame of the organisation's own code, heapwatch.test being the
// main module heapwatch.test/fixtures' organisation); the leaf is protobuf's
// (google.golang.org/protobuf/internal/impl.mergeBytesNoZero with
// protobuf v1.36.11); the stack holds no main-module frame. Rate: -rate, from
// the first second (main.loadState holds a small stable part first).
package main

import (
	"google.golang.org/protobuf/types/known/wrapperspb"
	"heapwatch.test/raftlike"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	rate      = fixture.BytesFlag("rate", 32<<20, "bytes per second proposed and kept by the raft node")
	entrySize = fixture.BytesFlag("entry", 64<<10, "payload of one entry")
	state     = fixture.BytesFlag("state", 4<<20, "bytes held for good by main.loadState")
)

var held [][]byte

//go:noinline
func loadState(total int) [][]byte {
	const c = 64 << 10
	out := make([][]byte, 0, total/c)
	for i := 0; i < total/c; i++ {
		b := make([]byte, c)
		fixture.Touch(b, byte(i))
		out = append(out, b)
	}
	return out
}

// propose builds one proposal; the node's clone is what is kept, this one
// becomes garbage once the node has copied it.
//
//go:noinline
func propose(n *raftlike.Node, i, size int) {
	v := make([]byte, size)
	fixture.Touch(v, byte(i))
	n.Propose(wrapperspb.Bytes(v))
}

func main() {
	fixture.Parse()
	fixture.Serve()
	held = loadState(int(*state))
	n := raftlike.StartNode()
	size := max(int(*entrySize), 1)
	i := 0
	fixture.PaceConstant(int64(*rate), size, func(int) {
		i++
		propose(n, i, size)
	})
}
