// goleak is a Go process with a known goroutine leak, for heapwatch's proc source to read
// out of its memory: 100 goroutines created by startLeak parked in a channel receive inside
// an inlined helper, 20 created by startSelects parked in a generic select, one asleep in
// time.Sleep, one blocked in a read(2) system call on a pipe, and one spinning on a thread
// (running: its stack is on the thread, not in memory). Then it serves net/http/pprof on a
// loopback port, and /debug/pprof/goroutine is the oracle.
package main

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"syscall"
	"time"
)

var (
	never   = make(chan int)
	spins   int
	started = make(chan bool, 200)
)

// park is small enough to be inlined into worker: the parked frame is an inlined one.
func park(ch chan int) int {
	return <-ch
}

//go:noinline
func worker(id int) {
	started <- true
	spins += park(never) + id
}

//go:noinline
func startLeak(n int) {
	for i := 0; i < n; i++ {
		go worker(i)
	}
}

// waitOn is generic: its frames carry a shape.
//
//go:noinline
func waitOn[T any](a, b chan T) T {
	started <- true
	select {
	case v := <-a:
		return v
	case v := <-b:
		return v
	}
}

//go:noinline
func startSelects(n int) {
	a, b := make(chan string), make(chan string)
	for i := 0; i < n; i++ {
		go waitOn(a, b)
	}
}

//go:noinline
func sleeper() {
	started <- true
	time.Sleep(time.Hour)
}

//go:noinline
func reader(fd int) {
	started <- true
	buf := make([]byte, 1)
	syscall.Read(fd, buf)
}

//go:noinline
func spin() {
	started <- true
	for {
		spins++
	}
}

func main() {
	startLeak(100)
	startSelects(20)
	go sleeper()
	var p [2]int
	if err := syscall.Pipe(p[:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go reader(p[0])
	if runtime.GOMAXPROCS(0) > 1 {
		go spin()
	} else {
		started <- true
	}
	for i := 0; i < 123; i++ {
		<-started
	}
	// Every goroutine has reached its parking place once its send is done; give the last
	// ones time to park.
	time.Sleep(200 * time.Millisecond)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	if err := http.Serve(ln, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
