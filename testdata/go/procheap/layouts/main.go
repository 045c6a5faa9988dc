// layouts prints the byte offset, size and type of every field of the runtime structs named
// on its command line, from the DWARF of a Go binary: `layouts BINARY runtime.g runtime.gobuf`.
// heapwatch's tests check the offsets its proc source reads at against these, per release.
package main

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"strings"
)

func main() {
	f, err := elf.Open(os.Args[1])
	if err != nil {
		panic(err)
	}
	d, err := f.DWARF()
	if err != nil {
		panic(err)
	}
	want := map[string]bool{}
	if len(os.Args) == 2 {
		for _, s := range []string{"runtime.g", "runtime.gobuf"} {
			want[s] = true
		}
	}
	for _, s := range os.Args[2:] {
		want[s] = true
	}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if !want[name] {
			continue
		}
		t, err := d.Type(e.Offset)
		if err != nil {
			panic(err)
		}
		st := t.(*dwarf.StructType)
		for _, fld := range st.Field {
			fmt.Printf("%s.%s %d %d %s\n", name, fld.Name, fld.ByteOffset, fld.Type.Size(), strings.ReplaceAll(fld.Type.String(), " ", ""))
		}
		fmt.Printf("%s %d\n", name, st.ByteSize)
		delete(want, name)
	}
}
