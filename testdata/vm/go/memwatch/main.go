// Command memwatch watches a cgroup v2 directory's memory.events two ways at once, inotify
// (IN_MODIFY) and poll(2) (POLLPRI), and samples memory.current; every line has the wall clock
// in µs. It writes "ready" to -ready once both watches are in place.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

var (
	mu  sync.Mutex
	out *os.File
)

func logf(format string, args ...any) {
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "t_us=%d "+format+"\n", append([]any{time.Now().UnixMicro()}, args...)...)
}

func readAll(fd int) string {
	buf := make([]byte, 4096)
	n, err := syscall.Pread(fd, buf, 0)
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.Join(strings.Fields(string(bytes.TrimSpace(buf[:n]))), " ")
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "error"
	}
	return strings.TrimSpace(string(b))
}

func main() {
	dir := flag.String("cg", "/sys/fs/cgroup/t", "cgroup directory")
	outPath := flag.String("o", "-", "log file")
	ready := flag.String("ready", "", "file written once the watches are in place")
	sample := flag.Duration("sample", 20*time.Millisecond, "memory.current sampling period (0 = off)")
	flag.Parse()

	out = os.Stdout
	if *outPath != "-" {
		f, err := os.Create(*outPath)
		if err != nil {
			panic(err)
		}
		out = f
	}
	events := filepath.Join(*dir, "memory.events")

	// inotify
	ifd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		panic(err)
	}
	if _, err := syscall.InotifyAddWatch(ifd, events, syscall.IN_MODIFY); err != nil {
		panic(err)
	}
	evfd, err := syscall.Open(events, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		panic(err)
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := syscall.Read(ifd, buf)
			if err != nil {
				logf("inotify error %v", err)
				return
			}
			count := 0
			for off := 0; off+syscall.SizeofInotifyEvent <= n; count++ {
				ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
				off += syscall.SizeofInotifyEvent + int(ev.Len)
			}
			logf("inotify n=%d events: %s", count, readAll(evfd))
		}
	}()

	// poll(2) on a second descriptor: read it once, then POLLPRI marks each change.
	pfd, err := syscall.Open(events, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		panic(err)
	}
	readAll(pfd)
	go func() {
		type pollFd struct {
			fd      int32
			events  int16
			revents int16
		}
		const pollPri, pollErr = 0x2, 0x8
		for {
			p := pollFd{fd: int32(pfd), events: pollPri}
			_, _, e := syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&p)), 1, ^uintptr(0))
			if e != 0 && e != syscall.EINTR {
				logf("poll error %v", e)
				return
			}
			if p.revents&(pollPri|pollErr) != 0 {
				logf("poll revents=%#x events: %s", p.revents, readAll(pfd))
			}
		}
	}()

	if *ready != "" {
		if err := os.WriteFile(*ready, []byte("ready\n"), 0o644); err != nil {
			panic(err)
		}
	}
	logf("watching %s", events)
	if *sample <= 0 {
		select {}
	}
	current := filepath.Join(*dir, "memory.current")
	for range time.Tick(*sample) {
		logf("current=%s", readFile(current))
	}
}
