// corrupt builds a small heap profile, publishes it, turns the GC off (so the runtime itself
// never walks its bucket list again), then damages that list the way a memory bug could, and
// waits. heapwatch's proc source must answer each with a failed attempt naming the damage,
// bounded in time and memory, never a hang or gigabytes.
//
//	corrupt loop      the newest bucket's allnext points at itself
//	corrupt nstk      the newest bucket claims 2^40 stack frames
//	corrupt unmapped  the newest bucket's allnext points into a page that was unmapped
//	corrupt uffd      the newest bucket's allnext points into pages registered with a
//	                  userfaultfd nobody serves: any read of them, the kernel's too, blocks
//	corrupt allgs-len runtime.allgs claims 2^32 goroutines, far beyond its array's mapping
//	corrupt allgs-loop runtime.allgs lists its first goroutine again in its last place
//
// The allgs modes keep a goroutine spinning, so that no thread goes idle and the scheduler's
// deadlock check (which walks allgs) never runs, and create no goroutine after the damage.
//
// Reaching runtime.mbuckets takes a linkname the linker only allows with
// -ldflags=-checklinkname=0.
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"
	"unsafe"
)

// bucket mirrors the header of runtime.bucket (mprof.go), unchanged from Go 1.23 to 1.26.
type bucket struct {
	next    *bucket
	allnext *bucket
	typ     int
	hash    uintptr
	size    uintptr
	nstk    uintptr
}

//go:linkname mbuckets runtime.mbuckets
var mbuckets *bucket

//go:linkname allgs runtime.allgs
var allgs []unsafe.Pointer

var spins int

//go:noinline
func spin() {
	for {
		spins++
	}
}

var keep [][]byte

//go:noinline
func retain(n int) {
	for i := 0; i < n; i++ {
		keep = append(keep, make([]byte, 4096))
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: corrupt loop|nstk|unmapped|uffd|allgs-len|allgs-loop")
		os.Exit(2)
	}
	if len(os.Args) > 2 {
		// Never runs; keeps runtime.MemProfile reachable, or the linker turns profiling off.
		runtime.MemProfile(nil, true)
	}
	runtime.MemProfileRate = 4096
	retain(1000)
	runtime.GC()
	runtime.GC()
	debug.SetGCPercent(-1)
	// No new sample may add a bucket (and look at the damaged one) once it is damaged.
	runtime.MemProfileRate = 0

	if len(os.Args[1]) > 6 && os.Args[1][:6] == "allgs-" {
		go spin()
		time.Sleep(100 * time.Millisecond)
	}
	head := mbuckets
	switch os.Args[1] {
	case "allgs-len":
		header := (*[3]uintptr)(unsafe.Pointer(&allgs))
		header[1] = 1 << 32
		header[2] = 1 << 32
	case "allgs-loop":
		allgs[len(allgs)-1] = allgs[0]
	case "loop":
		head.allnext = head
	case "nstk":
		head.nstk = 1 << 40
	case "unmapped":
		page, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		at := uintptr(unsafe.Pointer(&page[0]))
		if err := syscall.Munmap(page); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// A pointer the GC would choke on: it stays off.
		*(*uintptr)(unsafe.Pointer(&head.allnext)) = at + 64
	case "uffd":
		at, err := unservedPages(1 << 16)
		if err != nil {
			fmt.Fprintln(os.Stderr, "userfaultfd:", err)
			os.Exit(1)
		}
		*(*uintptr)(unsafe.Pointer(&head.allnext)) = at
	default:
		fmt.Fprintln(os.Stderr, "usage: corrupt loop|nstk|unmapped|uffd|allgs-len|allgs-loop")
		os.Exit(2)
	}
	fmt.Printf("ready %s\n", os.Args[1])
	for {
		time.Sleep(time.Hour)
	}
}

// unservedPages maps n bytes and registers them with a new userfaultfd for missing-page
// faults, then never reads the descriptor: the first touch of a page waits for ever.
func unservedPages(n int) (uintptr, error) {
	const (
		sysUserfaultfd  = 323        // amd64
		uffdioAPI       = 0xc018aa3f // _IOWR(0xAA, 0x3F, struct uffdio_api)
		uffdioRegister  = 0xc020aa00 // _IOWR(0xAA, 0x00, struct uffdio_register)
		uffdAPI         = 0xAA
		registerMissing = 1
	)
	fd, _, errno := syscall.Syscall(sysUserfaultfd, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	api := [3]uint64{uffdAPI, 0, 0}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		return 0, errno
	}
	pages, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return 0, err
	}
	at := uintptr(unsafe.Pointer(&pages[0]))
	reg := [4]uint64{uint64(at), uint64(n), registerMissing, 0}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, uffdioRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		return 0, errno
	}
	return at, nil
}
