// Command execinto is a Go program that becomes another one in place: it holds a
// small heap in main.holdState, serves net/http/pprof like the other fixtures,
// and on SIGUSR1 calls execve on the command line given after its flags, keeping
// its pid (as a wrapper or a self-updating binary does). Discovery must notice
// that the process it judged is no longer the same program.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"heapwatch.test/fixtures/internal/fixture"
)

var state = fixture.BytesFlag("state", 2<<20, "bytes held for good by main.holdState")

var held [][]byte

//go:noinline
func holdState(total int) {
	const c = 64 << 10
	for i := 0; i < total/c; i++ {
		b := make([]byte, c)
		fixture.Touch(b, byte(i))
		held = append(held, b)
	}
}

func main() {
	fixture.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: execinto [flags] PROGRAM [ARGS...]")
		os.Exit(2)
	}
	path, err := exec.LookPath(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	holdState(int(*state))
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	fixture.Serve()
	<-usr1
	err = syscall.Exec(path, flag.Args(), os.Environ())
	fmt.Fprintf(os.Stderr, "exec %s: %v\n", path, err)
	os.Exit(1)
}
