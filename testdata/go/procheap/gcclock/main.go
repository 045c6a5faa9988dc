// gcclock runs GC cycles when told to, and says how many have ended: for each line N read on
// stdin it calls runtime.GC() N times, then prints "numgc C" with runtime.ReadMemStats's NumGC,
// and waits for the next line. It allocates next to nothing, so no other GC runs while it
// waits: a proc capture taken then must carry the runtime's own count, C.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
)

var keep [][]byte

func main() {
	if len(os.Args) > 1 {
		// Never runs; keeps runtime.MemProfile reachable, or the linker turns heap profiling
		// off and heapwatch's proc source refuses the process.
		runtime.MemProfile(nil, true)
	}
	for i := 0; i < 1000; i++ {
		keep = append(keep, make([]byte, 1024))
	}
	var m runtime.MemStats
	lines := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	for lines.Scan() {
		n, err := strconv.Atoi(lines.Text())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for i := 0; i < n; i++ {
			runtime.GC()
		}
		runtime.ReadMemStats(&m)
		fmt.Printf("numgc %d\n", m.NumGC)
	}
}
