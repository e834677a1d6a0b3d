package nic_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/nicdrv/usbnet/usbfake"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
)

// txSeen records the TX data descriptors the model read.
type txSeen struct {
	mu   sync.Mutex
	mems []txDesc
}

// txDesc is the memory one TX data descriptor pointed at, and its IOVA.
type txDesc struct {
	iova uint64
	b    []byte
}

func (s *txSeen) hook(port int, iova uint64, mem []byte) {
	if port != 0 {
		return
	}
	s.mu.Lock()
	s.mems = append(s.mems, txDesc{iova, mem})
	s.mu.Unlock()
}

// inPlace reports whether descriptors ds point, one after the other, at
// the n bytes of mem from off.
func inPlace(ds []txDesc, mem []byte, off, n int) bool {
	for _, d := range ds {
		if !pointsInto(d.b, mem, off) {
			return false
		}
		off += len(d.b)
		n -= len(d.b)
	}
	return n == 0
}

// pointsInto reports whether the descriptor memory m starts at &mem[off].
func pointsInto(m, mem []byte, off int) bool {
	return len(m) > 0 && &m[0] == &mem[off]
}

// TestSendInPlaceDescriptors proves that a frame of a registered region is
// not copied: the model reads its payload through a TX descriptor whose
// address translates to the caller's own bytes, the header from another
// descriptor, and the frame arrives whole. Frames without a region still
// go out as one pool buffer.
func TestSendInPlaceDescriptors(t *testing.T) {
	var seen txSeen
	mo := emulated.DefaultE1000EOptions()
	mo.TxBuffer = seen.hook
	a, b := modelPairWith(t, mo, e1000e.DefaultOptions())
	defer a.Close()
	defer b.Close()

	const frames, size = 8, 1500
	mem := make([]byte, frames*size)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	r, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if !r.InPlace() {
		t.Fatal("a region of the nic transport copies")
	}
	batch := make([]transport.Frame, frames)
	for i := range batch {
		batch[i] = r.Frame(b.Addr(), i*size, size)
	}
	if n, err := a.Send(batch); n != frames || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	rx := make([]transport.Frame, frames)
	for got, tries := 0, 0; got < frames; tries++ {
		if tries == 100 {
			t.Fatalf("%d of %d frames arrived", got, frames)
		}
		n, err := b.Recv(rx[got:], time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rx[got : got+n] {
			if want := mem[got*size : (got+1)*size]; !bytes.Equal(f.Data, want) {
				t.Fatalf("frame %d arrived changed", got)
			}
			got++
		}
	}
	// Completion: the model transmits on the tail write, so the driver
	// reclaimed every frame; a poll of the sender's Recv covers a NIC
	// that sends later.
	for tries := 0; r.Pending() != 0; tries++ {
		if tries == 1000 {
			t.Fatalf("%d in-place sends pending after the frames arrived", r.Pending())
		}
		if _, err := a.Recv(rx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if r.InPlaceSends() != frames || r.CopiedSends() != 0 {
		t.Errorf("region counted %d in place, %d copied; want %d, 0", r.InPlaceSends(), r.CopiedSends(), frames)
	}

	seen.mu.Lock()
	mems := seen.mems
	seen.mems = nil
	seen.mu.Unlock()
	// Each frame: the header, then its payload in descriptors that each
	// stay within one 4 KiB IOMMU page (QEMU's e1000e maps a descriptor's
	// buffer in one piece), pointing at the region's own bytes in order.
	j := 0
	for i := range frames {
		if j >= len(mems) {
			t.Fatalf("model read %d TX data descriptors: frame %d has none", len(mems), i)
		}
		if len(mems[j].b) != 14 {
			t.Errorf("frame %d: first descriptor of %d bytes, want the 14-byte header", i, len(mems[j].b))
		}
		j++
		for off := i * size; off < (i+1)*size; j++ {
			if j >= len(mems) {
				t.Fatalf("frame %d: payload descriptors end at byte %d of %d", i, off-i*size, size)
			}
			d := mems[j]
			if !pointsInto(d.b, mem, off) {
				t.Fatalf("frame %d: payload descriptor at byte %d does not point at the region's bytes: the payload was copied", i, off-i*size)
			}
			if d.iova/4096 != (d.iova+uint64(len(d.b))-1)/4096 {
				t.Errorf("frame %d: payload descriptor of %d bytes at IOVA %#x crosses a 4 KiB page", i, len(d.b), d.iova)
			}
			off += len(d.b)
		}
	}
	if j != len(mems) {
		t.Errorf("model read %d TX data descriptors for %d frames, %d more than their headers and payloads", len(mems), frames, len(mems)-j)
	}

	// A frame without a region: one descriptor, a pool buffer.
	if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: mem[:size]}}); err != nil {
		t.Fatal(err)
	}
	seen.mu.Lock()
	mems = seen.mems
	seen.mu.Unlock()
	if len(mems) != 1 || len(mems[0].b) != 14+size || pointsInto(mems[0].b, mem, 0) {
		t.Errorf("a frame without a region went out as %d descriptors, want one pool buffer of %d bytes", len(mems), 14+size)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close of a completed region: %v", err)
	}
}

// TestSendInPlaceHead: a frame of a region with a Head goes out as the
// Ethernet header and the Head in a pool buffer, the payload read in place
// from the region, and arrives as Head followed by Data.
func TestSendInPlaceHead(t *testing.T) {
	var seen txSeen
	mo := emulated.DefaultE1000EOptions()
	mo.TxBuffer = seen.hook
	a, b := modelPairWith(t, mo, e1000e.DefaultOptions())
	defer a.Close()
	defer b.Close()

	mem := make([]byte, 4096)
	for i := range mem {
		mem[i] = byte(i * 3)
	}
	r, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if !r.TakesHead() {
		t.Fatal("a region of the nic transport takes no head")
	}
	head := []byte("header of 20 bytes..")
	f := r.Frame(b.Addr(), 100, 1000)
	f.Head = head
	if n, err := a.Send([]transport.Frame{f}); n != 1 || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	rx := make([]transport.Frame, 1)
	for tries := 0; ; tries++ {
		if tries == 100 {
			t.Fatal("the frame never arrived")
		}
		n, err := b.Recv(rx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
	}
	want := append(append([]byte{}, head...), mem[100:1100]...)
	if !bytes.Equal(rx[0].Data, want) {
		t.Fatal("the frame arrived changed: want Head then Data")
	}
	seen.mu.Lock()
	mems := seen.mems
	seen.mu.Unlock()
	if len(mems) < 2 || len(mems[0].b) != 14+len(head) || !inPlace(mems[1:], mem, 100, 1000) {
		t.Errorf("model read %d descriptors; want the Ethernet header and Head (%d bytes) and the region's 1000 bytes in place", len(mems), 14+len(head))
	}
	// Too big with its head: refused, nothing sent.
	big := r.Frame(b.Addr(), 0, a.MTU())
	big.Head = head
	if _, err := a.Send([]transport.Frame{big}); !errors.Is(err, transport.ErrTooBig) {
		t.Errorf("a frame whose Head and Data exceed the MTU: %v, want ErrTooBig", err)
	}
	for tries := 0; r.Pending() != 0; tries++ {
		if tries == 1000 {
			t.Fatalf("%d in-place sends pending", r.Pending())
		}
		if _, err := a.Recv(rx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// usbPair is the nic transport over the usbnet driver on two cabled fake
// NCM functions.
func usbPair(t *testing.T) (a, b *nic.Transport) {
	t.Helper()
	devs := [2]*usbfake.Device{
		usbfake.New(usbfake.Options{Model: usbnet.NCM, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0, 0x0A}, Address: 2}),
		usbfake.New(usbfake.Options{Model: usbnet.NCM, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0, 0x0B}, Address: 3}),
	}
	usbfake.Cable(devs[0], devs[1])
	var trs [2]*nic.Transport
	for i, d := range devs {
		n, err := usbnet.Open(d, usbnet.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		tr, err := nic.New(n, nic.Options{})
		if err != nil {
			n.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trs[i] = tr
	}
	return trs[0], trs[1]
}

// TestRegisterOverUSBCopies: the usbnet driver copies attached memory into
// its bulk transfers, so the transport's regions over it say they copy
// (InPlace false), still take a Head, send Head and Data byte-exact, and
// count each frame copied, none in place.
func TestRegisterOverUSBCopies(t *testing.T) {
	a, b := usbPair(t)
	if !a.NIC().Info().TxAttachCopied {
		t.Fatal("usbnet does not say that it copies attached memory (Info.TxAttachCopied)")
	}
	mem := make([]byte, 4096)
	for i := range mem {
		mem[i] = byte(i * 5)
	}
	r, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if r.InPlace() || !r.TakesHead() {
		t.Fatalf("region over usbnet: InPlace %v, TakesHead %v; want false, true", r.InPlace(), r.TakesHead())
	}
	head := []byte("mx header, 16 B.")
	const frames = 3
	batch := make([]transport.Frame, frames)
	for i := range batch {
		batch[i] = r.Frame(b.Addr(), 100+i*1000, 1000)
		batch[i].Head = head
	}
	if n, err := a.Send(batch); n != frames || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	// Copied during Send: the caller may change the memory at once.
	for i := range mem {
		mem[i] = 0xEE
	}
	rx := make([]transport.Frame, frames)
	for got, tries := 0, 0; got < frames; tries++ {
		if tries == 100 {
			t.Fatalf("%d of %d frames arrived", got, frames)
		}
		n, err := b.Recv(rx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rx[:n] {
			want := append(append([]byte{}, head...), make([]byte, 1000)...)
			for k := range 1000 {
				want[len(head)+k] = byte((100 + got*1000 + k) * 5)
			}
			if !bytes.Equal(f.Data, want) {
				t.Fatalf("frame %d arrived changed (or read after Send returned): want Head then the Data as it was", got)
			}
			got++
		}
	}
	if r.Pending() != 0 || r.InPlaceSends() != 0 || r.CopiedSends() != frames {
		t.Errorf("region counted %d pending, %d in place, %d copied; want 0, 0, %d", r.Pending(), r.InPlaceSends(), r.CopiedSends(), frames)
	}
	c := map[string]uint64{}
	for _, k := range a.Counters() {
		c[k.Name] = k.Value
	}
	if c["nic_tx_in_place"] != 0 || c["nic_tx_region_copied"] != frames {
		t.Errorf("nic_tx_in_place %d, nic_tx_region_copied %d; want 0, %d", c["nic_tx_in_place"], c["nic_tx_region_copied"], frames)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
