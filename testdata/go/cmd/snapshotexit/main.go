// Command snapshotexit behaves like a controller that installs a snapshot: it
// loads state into main.installSnapshot (-state bytes, each page written), runs
// for -exit-after, then exits with code 0 so that its supervisor restarts it
// (a kubelet under restartPolicy Always does). It prints nothing after the
// listening line.
package main

import (
	"flag"
	"os"
	"time"

	"heapwatch.test/fixtures/internal/fixture"
)

var (
	state     = fixture.BytesFlag("state", 16<<20, "bytes held by main.installSnapshot")
	exitAfter = flag.Duration("exit-after", 2*time.Second, "run this long, then exit 0")
)

var installed [][]byte

//go:noinline
func installSnapshot(total int) {
	const c = 256 << 10
	for i := 0; i < total/c; i++ {
		b := make([]byte, c)
		fixture.Touch(b, byte(i))
		installed = append(installed, b)
	}
}

func main() {
	fixture.Parse()
	fixture.Serve()
	installSnapshot(int(*state))
	time.Sleep(*exitAfter)
	os.Exit(0)
}
