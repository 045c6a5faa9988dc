// Command oomgrow grows its in-use heap fast and forever, until the kernel
// kills it: main.(*routerDataModel).buildEventList retains every event it
// builds (~32 MiB/s by default, in chunks of 256 KiB, each page written so
// that RSS really grows). main.initStore holds a small stable part. After
// the listening line it prints nothing.
package main

import (
	"flag"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	rate      = fixture.BytesFlag("rate", 32<<20, "growth in bytes per second (main.(*routerDataModel).buildEventList)")
	chunk     = fixture.BytesFlag("chunk", 256<<10, "size of one retained event (64 KiB to 1 MiB is realistic)")
	storeSize = fixture.BytesFlag("store", 4<<20, "bytes held for good by main.initStore")
	delay     = flag.Duration("delay", 0, "sleep this long before the growth starts (the migration phase)")
)

type routerDataModel struct {
	events [][]byte // never trimmed
	seq    int
}

var (
	store [][]byte
	model routerDataModel
)

//go:noinline
func initStore(total int) [][]byte {
	const c = 64 << 10
	s := make([][]byte, 0, total/c)
	for i := 0; i < total/c; i++ {
		b := make([]byte, c)
		fixture.Touch(b, byte(i))
		s = append(s, b)
	}
	return s
}

//go:noinline
func (m *routerDataModel) buildEventList(size int) {
	m.seq++
	ev := make([]byte, size)
	fixture.Touch(ev, byte(m.seq))
	m.events = append(m.events, ev)
}

func main() {
	fixture.Parse()
	fixture.Serve()
	store = initStore(int(*storeSize))
	time.Sleep(*delay)
	fixture.PaceConstant(int64(*rate), max(int(*chunk), 1), model.buildEventList)
}
