// memstats builds a heap, runs a few GCs with GOGC=150 and a 300 MiB memory limit, then calls
// runtime.ReadMemStats and prints the figures, and freezes: from then on it allocates nothing
// (the figures are formatted into a buffer made beforehand and written with a raw write(2)),
// and sleeps for ever, on the timer its first sleep made (a blocking system call would make
// the runtime hand its P to a new thread, whose stack and m the figures would then count).
// heapwatch's proc source must read the same MemStats out of its memory.
package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"
)

var (
	keep  [][]byte
	sink  []byte
	m     runtime.MemStats
	out   = make([]byte, 0, 64<<10)
	ready = make(chan bool)
)

//go:noinline
func retain(n, size int) {
	for i := 0; i < n; i++ {
		keep = append(keep, make([]byte, size))
	}
}

//go:noinline
func churn(n int) {
	for i := 0; i < n; i++ {
		sink = make([]byte, 100+i%3000)
	}
	sink = nil
}

//go:noinline
func parked(park, done chan bool, ends bool) {
	ready <- true
	<-park
	if ends {
		done <- true
	}
}

func line(name string, v uint64) {
	out = append(out, name...)
	out = append(out, ' ')
	out = strconv.AppendUint(out, v, 10)
	out = append(out, '\n')
}

func main() {
	if len(os.Args) > 1 {
		// Never runs; keeps runtime.MemProfile reachable, or the linker turns heap profiling
		// off and heapwatch's proc source refuses the process.
		runtime.MemProfile(nil, true)
	}
	debug.SetGCPercent(150)
	debug.SetMemoryLimit(300 << 20)
	retain(2000, 8192)
	retain(30, 1<<20)
	churn(100000)
	runtime.GC()
	churn(50000)
	runtime.GC()
	retain(5000, 64)
	// Parking takes a sudog, which is allocated when the caches hold none, and a goroutine
	// takes a g and a stack: 50 goroutines park and end first, so that the 50 that stay find
	// all three cached, even those that park only after the figures are read.
	for round := 0; round < 2; round++ {
		park, done := make(chan bool), make(chan bool)
		for i := 0; i < 50; i++ {
			go parked(park, done, round == 0)
		}
		for i := 0; i < 50; i++ {
			<-ready
		}
		time.Sleep(100 * time.Millisecond)
		if round == 0 {
			close(park)
			for i := 0; i < 50; i++ {
				<-done
			}
		}
	}

	runtime.ReadMemStats(&m)
	line("Alloc", m.Alloc)
	line("TotalAlloc", m.TotalAlloc)
	line("Sys", m.Sys)
	line("Mallocs", m.Mallocs)
	line("Frees", m.Frees)
	line("HeapAlloc", m.HeapAlloc)
	line("HeapSys", m.HeapSys)
	line("HeapIdle", m.HeapIdle)
	line("HeapInuse", m.HeapInuse)
	line("HeapReleased", m.HeapReleased)
	line("HeapObjects", m.HeapObjects)
	line("StackInuse", m.StackInuse)
	line("StackSys", m.StackSys)
	line("MSpanInuse", m.MSpanInuse)
	line("MSpanSys", m.MSpanSys)
	line("MCacheInuse", m.MCacheInuse)
	line("MCacheSys", m.MCacheSys)
	line("BuckHashSys", m.BuckHashSys)
	line("GCSys", m.GCSys)
	line("OtherSys", m.OtherSys)
	line("NextGC", m.NextGC)
	line("LastGC", m.LastGC)
	line("PauseTotalNs", m.PauseTotalNs)
	line("NumGC", uint64(m.NumGC))
	line("NumForcedGC", uint64(m.NumForcedGC))
	out = append(out, "ready\n"...)
	syscall.Write(1, out)
	for {
		time.Sleep(time.Hour)
	}
}
