//go:build cgo

package main

// static int answer(void) { return 42; }
import "C"

// With cgo the sleeper is a dynamically linked binary (it needs libc and
// the loader), which the docker tests run FROM scratch all the same.
func init() { println("cgo:", int(C.answer())) }
