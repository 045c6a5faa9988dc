//go:build cgo && !procheap_nocgo

// With cgo on (and without the procheap_nocgo tag), the program calls into C once at start: a
// real cgo program, which the go command links with the system linker (gcc and ld), the way a
// cgo service is built. Built with procheap_nocgo and -ldflags=-linkmode=external instead, it
// is a pure Go program that the system linker links all the same.
package main

/*
#include <stdlib.h>
static int cgo_sum(int n) {
	int *v = malloc(sizeof(int) * n);
	int s = 0;
	for (int i = 0; i < n; i++) { v[i] = i; s += v[i]; }
	free(v);
	return s;
}
*/
import "C"

var cgoSum = int(C.cgo_sum(100))
