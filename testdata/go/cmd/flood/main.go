// Command flood is a message server's common road to an OOM kill: it starts,
// idles for -idle, then a flood arrives and main.(*memStore).storeRawMsg
// retains every message (-rate bytes per second) until the kernel kills it.
//
// Beside the retained growth it can do what real servers do at the same time:
//   - -storm-rate: main.(*client).parse allocates and drops a buffer per message,
//     a loud transient allocation storm that holds nothing (from -storm-at for
//     -storm-for; -churn outside it);
//   - -cap: the store keeps at most this many bytes (the oldest are dropped), so
//     the heap fills and then holds, a bounded cache never to be forecast to die
//     (run it with GOMEMLIMIT for a plateau of the process's memory as well);
//   - -pool: messages are queued for delivery instead, in buffers from a
//     sync.Pool whose New func allocates them and that are never put back:
//     the leaf of every retained sample is the pool's New func
//     (main.init.func1), the cause main.(*client).queueOutbound three frames up;
//   - -conns: connections per second that are opened and never closed, each
//     served by main.(*client).readLoop (parked in the standard library's
//     net.(*conn).Read) and main.(*client).writeLoop (parked in
//     sync.(*Cond).Wait): a goroutine leak whose leaves are all in the
//     standard library.
//
// With -for it exits 0 after that long (a healthy run that ends by itself).
package main

import (
	"flag"
	"net"
	"os"
	"sync"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	idle      = flag.Duration("idle", 3*time.Second, "quiet time before the flood")
	rate      = fixture.BytesFlag("rate", 20<<20, "bytes per second retained during the flood")
	msgSize   = fixture.BytesFlag("msg", 64<<10, "size of one message")
	capBytes  = fixture.BytesFlag("cap", 0, "most bytes the store keeps (0: no bound)")
	stormRate = fixture.BytesFlag("storm-rate", 0, "bytes per second allocated and dropped in main.(*client).parse during the flood")
	churn     = fixture.BytesFlag("churn", 0, "bytes per second allocated and dropped in main.(*client).parse outside the storm")
	stormAt   = flag.Duration("storm-at", 0, "when the storm starts, after the flood's start")
	stormFor  = flag.Duration("storm-for", 0, "how long the storm lasts (0: to the end)")
	usePool   = flag.Bool("pool", false, "retain messages in pooled outbound buffers (main.(*client).queueOutbound)")
	conns     = flag.Float64("conns", 0, "connections per second opened and never closed")
	runFor    = flag.Duration("for", 0, "exit 0 after this long (0: never)")
	idleHeap  = fixture.BytesFlag("base", 2<<20, "bytes held for good from the start (main.loadConfig)")
)

type memStore struct {
	mu    sync.Mutex
	msgs  [][]byte
	bytes int
	cap   int
}

//go:noinline
func (s *memStore) storeRawMsg(m []byte) {
	b := make([]byte, len(m))
	copy(b, m)
	fixture.Touch(b, m[0])
	s.mu.Lock()
	s.msgs = append(s.msgs, b)
	s.bytes += len(b)
	for s.cap > 0 && s.bytes > s.cap {
		s.bytes -= len(s.msgs[0])
		s.msgs[0] = nil
		s.msgs = s.msgs[1:]
	}
	s.mu.Unlock()
}

type client struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending [][]byte
	conn    net.Conn
	scratch []byte
}

var outPool = sync.Pool{New: func() any {
	b := make([]byte, int(*msgSize))
	return &b
}}

//go:noinline
func (c *client) queueOutbound(m []byte) {
	bp := outPool.Get().(*[]byte)
	copy(*bp, m)
	fixture.Touch(*bp, m[0])
	c.mu.Lock()
	c.pending = append(c.pending, *bp) // never flushed, never put back
	c.mu.Unlock()
}

//go:noinline
func (c *client) deliverMsg(m []byte) {
	c.queueOutbound(m)
}

// parse copies an incoming buffer to work on it and drops it.
//
//go:noinline
func (c *client) parse(size int) uint64 {
	buf := make([]byte, size)
	fixture.Touch(buf, byte(size))
	return fixture.Checksum(buf)
}

//go:noinline
func (c *client) readLoop() {
	b := make([]byte, 512)
	for {
		if _, err := c.conn.Read(b); err != nil {
			return
		}
	}
}

//go:noinline
func (c *client) writeLoop() {
	c.mu.Lock()
	for len(c.pending) == 0 {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

var (
	store  memStore
	config [][]byte
	open   []net.Conn
	sum    uint64
)

//go:noinline
func loadConfig(total int) [][]byte {
	const c = 64 << 10
	out := make([][]byte, 0, total/c)
	for i := 0; i < total/c; i++ {
		b := make([]byte, c)
		fixture.Touch(b, byte(i))
		out = append(out, b)
	}
	return out
}

// leakConnections opens connections to its own listener at perSec and never
// closes them; each accepted one gets a reader and a writer that wait forever.
func leakConnections(perSec float64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c := &client{conn: conn}
			c.cond = sync.NewCond(&c.mu)
			go c.readLoop()
			go c.writeLoop()
		}
	}()
	tick := time.NewTicker(time.Duration(float64(time.Second) / perSec))
	for range tick.C {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			continue
		}
		open = append(open, conn)
	}
}

func main() {
	fixture.Parse()
	fixture.Serve()
	if *runFor > 0 {
		time.AfterFunc(*runFor, func() { os.Exit(0) })
	}
	config = loadConfig(int(*idleHeap))
	store.cap = int(*capBytes)
	if *conns > 0 {
		go leakConnections(*conns)
	}
	time.Sleep(*idle)
	size := max(int(*msgSize), 1)
	msg := make([]byte, size)
	sender := &client{}
	if *stormRate > 0 || *churn > 0 {
		go fixture.Pace(func(elapsed time.Duration) int64 {
			if elapsed < *stormAt || (*stormFor > 0 && elapsed >= *stormAt+*stormFor) {
				return int64(*churn)
			}
			return int64(*stormRate)
		}, 256<<10, func(n int) {
			sum += sender.parse(n)
		})
	}
	if *rate <= 0 {
		fixture.Forever()
	}
	i := 0
	fixture.PaceConstant(int64(*rate), size, func(int) {
		i++
		msg[0] = byte(i)
		if *usePool {
			sender.deliverMsg(msg)
		} else {
			store.storeRawMsg(msg)
		}
	})
}
