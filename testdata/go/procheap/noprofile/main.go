// noprofile never references runtime.MemProfile, so the linker disables heap profiling in
// it (runtime.disableMemoryProfiling): heapwatch's proc source must refuse it clearly.
package main

import (
	"fmt"
	"time"
)

func main() {
	fmt.Println("ready")
	time.Sleep(time.Hour)
}
