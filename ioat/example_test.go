package ioat_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat"
)

// Example copies with the engine over an emulated platform of two CBDMA
// channels: a blocking Copy, then an asynchronous ICopy that the program
// overlaps with its own work before it Waits.
func Example() {
	plat, err := emulated.NewCBDMA(emulated.CBDMAOptions{Channels: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer plat.Close()
	o := ioat.DefaultEngineOptions()
	o.CPUThreshold = -1 // offload every request, however small
	eng, err := ioat.NewEngine(plat.Devices(), o)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	src := bytes.Repeat([]byte("gomx"), 16<<10) // 64 KiB
	dst := make([]byte, len(src))
	if err := eng.Copy(dst, src); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("Copy:", bytes.Equal(dst, src))

	dst2 := make([]byte, len(src))
	ck, err := eng.ICopy(dst2, src)
	if err != nil {
		fmt.Println(err)
		return
	}
	// ... work that does not touch src or dst2 ...
	if err := eng.Wait(context.Background(), ck); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ICopy+Wait:", string(dst2[:8]), bytes.Equal(dst2, src))
	fmt.Println("channels:", len(eng.Channels()))
	// Output:
	// Copy: true
	// ICopy+Wait: gomxgomx true
	// channels: 2
}
