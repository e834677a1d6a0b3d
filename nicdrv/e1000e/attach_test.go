package e1000e_test

import (
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
)

// An attachment completes only after the NIC wrote its descriptor back:
// with bus mastering off the model fetches nothing (and records the tail
// write as a violation), and no reclaim completes the frame; once mastering
// is back and the next tail write sends it, the completion comes.
func TestAttachCompletesAfterWriteBack(t *testing.T) {
	p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fn := p.Functions()[0]
	n, err := e1000e.Open(fn, e1000e.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	mem := make([]byte, 4096)
	m, err := n.Pool(0).DMA().Map(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Pool(0).DMA().Unmap(m)
	iova, _, err := m.IOVA(0)
	if err != nil {
		t.Fatal(err)
	}
	frame := func() *nicdrv.Buffer {
		b, err := n.Pool(0).Get()
		if err != nil {
			t.Fatal(err)
		}
		h := b.SetLen(14)
		copy(h, []byte{0x52, 0x54, 0, 0x12, 0x34, 0x57, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 0x88, 0xB5})
		return b
	}
	var done nictest.Completions
	b := frame()
	b.Attach(mem[:200], iova, &done)

	if err := pci.ClearCommand(fn, pci.CommandBusMaster); err != nil {
		t.Fatal(err)
	}
	if k, err := n.TxBatch(0, []*nicdrv.Buffer{b}); k != 1 || err != nil {
		t.Fatalf("TxBatch: %d, %v", k, err)
	}
	for range 10 {
		if _, err := n.TxBatch(0, nil); err != nil {
			t.Fatal(err)
		}
	}
	if done.Count() != 0 {
		t.Fatal("the attachment completed although the NIC never read the descriptors")
	}
	if s := p.Stats(0); s.Violations != 1 || !strings.Contains(s.LastViolation, "bus mastering off") {
		t.Fatalf("model: %d violations, the last %q; want the tail write with mastering off", s.Violations, s.LastViolation)
	}

	if err := pci.SetCommand(fn, pci.CommandBusMaster); err != nil {
		t.Fatal(err)
	}
	c := frame()
	c.SetLen(60)
	if k, err := n.TxBatch(0, []*nicdrv.Buffer{c}); k != 1 || err != nil {
		t.Fatalf("TxBatch: %d, %v", k, err)
	}
	if _, err := n.TxBatch(0, nil); err != nil {
		t.Fatal(err)
	}
	if done.Count() != 1 {
		t.Errorf("%d completions after the NIC sent the frame, want 1", done.Count())
	}
	if s := p.Stats(0); s.TxFrames != 2 || s.Violations != 1 {
		t.Errorf("model sent %d frames with %d violations, want 2 and the one above", s.TxFrames, s.Violations)
	}
}

// TxRingState names the registers and the driver's slots, and lists the
// descriptors around the head: a frame the NIC sent without being asked
// for a write-back (RS) is still the driver's to reclaim.
func TestTxRingState(t *testing.T) {
	p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n, err := e1000e.Open(p.Functions()[0], e1000e.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	b, err := n.Pool(0).Get()
	if err != nil {
		t.Fatal(err)
	}
	copy(b.SetLen(60), []byte{0x52, 0x54, 0, 0x12, 0x34, 0x57, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 0x88, 0xB5})
	if k, err := n.TxBatch(0, []*nicdrv.Buffer{b}); k != 1 || err != nil {
		t.Fatalf("TxBatch: %d, %v", k, err)
	}
	s := n.TxRingState(0, 2)
	for _, want := range []string{"TDH 1 TDT 1", "driver clean 0 tail 1", "slot 0: addr", "len 60 cmd 0x3 status 0x0 buffer true", "\n  slot 3:"} {
		if !strings.Contains(s, want) {
			t.Errorf("TxRingState lacks %q:\n%s", want, s)
		}
	}
	if s := n.TxRingState(5, 2); !strings.Contains(s, "no such queue") {
		t.Errorf("TxRingState(5): %q", s)
	}
}
