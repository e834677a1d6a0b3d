//go:build !(cabi && cgo)

package main

import (
	"fmt"
	"os"
)

// main, built without the cabi tag or without cgo, where the package holds
// no C API, says how to build the library instead.
func main() {
	fmt.Fprintln(os.Stderr, "libmyriexpress is a shared library: build it with `make libmyriexpress` (go build -tags cabi -buildmode=c-shared, with cgo)")
	os.Exit(2)
}
