package nicdrv_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
)

// Example opens a pair of cabled 82574L NICs on the emulated model and
// sends one Ethernet frame from the first to the second. The driver sees
// only pci.Device: handed two functions bound to vfio-pci (package vfio)
// instead of the model's, the same code drives real NICs.
func Example() {
	plat, err := emulated.NewE1000E(emulated.DefaultE1000EOptions()) // two NICs, cabled, link up
	if err != nil {
		fmt.Println(err)
		return
	}
	defer plat.Close()
	var nics [2]nicdrv.NIC
	for i, dev := range plat.Devices() {
		n, err := e1000e.Open(dev, e1000e.DefaultOptions())
		if err != nil {
			fmt.Println(err)
			return
		}
		defer n.Close()
		if _, err := n.WaitLink(true, 2*time.Second); err != nil {
			fmt.Println(err)
			return
		}
		nics[i] = n
	}
	a, b := nics[0], nics[1]

	// Frames are built in buffers of the sender's pool, which is mapped
	// for the NIC's DMA once.
	tx := make([]*nicdrv.Buffer, 1)
	if _, err := a.Pool(0).Alloc(tx); err != nil {
		fmt.Println(err)
		return
	}
	frame := tx[0].SetLen(60)
	dst, src := b.MAC(), a.MAC()
	copy(frame[0:6], dst[:])
	copy(frame[6:12], src[:])
	binary.BigEndian.PutUint16(frame[12:14], 0x88B5) // an EtherType for local experiments
	copy(frame[14:], "hello over the model")
	if n, err := a.TxBatch(0, tx); n != 1 {
		fmt.Println("transmit:", err)
		return
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rx := make([]*nicdrv.Buffer, 32)
	if _, err := b.WaitRx(ctx, time.Time{}, 0); err != nil {
		fmt.Println(err)
		return
	}
	n, err := b.RxBatch(0, rx)
	if err != nil || n != 1 {
		fmt.Println("receive:", n, err)
		return
	}
	got := rx[0].Data
	fmt.Printf("%d bytes from %v: %s\n", len(got), nicdrv.MAC(got[6:12]), got[14:34])
	b.Pool(0).Free(rx[:n]...) // received buffers belong to the caller
	// Output:
	// 60 bytes from 52:54:00:12:34:56: hello over the model
}
