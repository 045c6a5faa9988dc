// Command alloc grows its heap by -step bytes every -every and keeps all of it, writing to every
// page so the memory is really charged. Each step is logged with the wall clock (µs) and how long
// the step took, so throttling by memory.high shows up as slow steps.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	step := flag.Int("step", 4<<20, "bytes allocated per step")
	every := flag.Duration("every", 10*time.Millisecond, "pause between steps")
	limit := flag.Int("limit", 0, "stop (exit 0) after holding this many bytes; 0 = never")
	flag.Parse()

	var kept [][]byte
	held := 0
	fmt.Printf("alloc start t_us=%d pid=%d\n", time.Now().UnixMicro(), os.Getpid())
	for {
		t0 := time.Now()
		b := make([]byte, *step)
		for i := 0; i < len(b); i += 4096 {
			b[i] = byte(i>>12) | 1
		}
		kept = append(kept, b)
		held += len(b)
		d := time.Since(t0)
		fmt.Printf("alloc t_us=%d held_mib=%d step_us=%d\n", time.Now().UnixMicro(), held>>20, d.Microseconds())
		if *limit > 0 && held >= *limit {
			fmt.Printf("alloc done held_mib=%d\n", held>>20)
			return
		}
		time.Sleep(*every)
	}
}
