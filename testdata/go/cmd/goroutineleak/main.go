// Command goroutineleak leaks goroutines: main.(*hub).subscribe starts a
// main.watchSubscription goroutine for every new subscription (~50/s), and
// each one blocks forever receiving on a channel nobody sends on or closes.
// A fixed pool of healthy main.worker goroutines processes jobs meanwhile.
// The hub keeps every subscription, so the heap grows slowly in
// main.(*hub).subscribe as well.
package main

import (
	"flag"
	"sync"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	rate    = flag.Float64("rate", 50, "leaked goroutines per second")
	workers = flag.Int("workers", 8, "healthy worker goroutines")
	churn   = fixture.BytesFlag("churn", 4<<20, "bytes per second of short-lived allocation in main.worker")
)

const (
	backlogSize = 16 << 10 // per-subscription buffer, retained with the leak
	jobSize     = 8 << 10
)

type subscription struct {
	id      int
	updates chan []byte // never sent on, never closed
	backlog []byte
}

type hub struct {
	mu   sync.Mutex
	subs []*subscription
}

var sink = make([][]byte, 64)

//go:noinline
func watchSubscription(s *subscription) {
	for {
		u, ok := <-s.updates // blocks forever
		if !ok {
			return
		}
		copy(s.backlog, u)
	}
}

//go:noinline
func (h *hub) subscribe(id int) {
	s := &subscription{id: id, updates: make(chan []byte), backlog: make([]byte, backlogSize)}
	fixture.Touch(s.backlog, byte(id))
	h.mu.Lock()
	h.subs = append(h.subs, s)
	h.mu.Unlock()
	go watchSubscription(s)
}

//go:noinline
func worker(id int, jobs <-chan int) {
	for n := range jobs {
		buf := make([]byte, n)
		fixture.Touch(buf, byte(id))
		sink[id%len(sink)] = buf
	}
}

func main() {
	fixture.Parse()
	fixture.Serve()
	jobs := make(chan int, 64)
	for w := 0; w < max(*workers, 1); w++ {
		go worker(w, jobs)
	}
	go fixture.PaceConstant(int64(*churn), jobSize, func(size int) { jobs <- size })

	var h hub
	if *rate > 0 {
		every := time.Duration(float64(time.Second) / *rate)
		start := time.Now()
		id := 0
		for {
			// Catch up with the schedule; never sleep less than 1 ms.
			for time.Since(start) >= time.Duration(id)*every {
				h.subscribe(id)
				id++
			}
			time.Sleep(max(time.Until(start.Add(time.Duration(id)*every)), time.Millisecond))
		}
	}
	fixture.Forever()
}
