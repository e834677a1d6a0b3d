package nic_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/emulated/nicpair"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/transport"
)

// recvN receives n frames from tr (bounded), copying each whole, with
// whether it took a posting and where.
type gotFrame struct {
	whole  []byte
	placed []byte // the posted memory it took; nil for none
	lane   uint8  // the lane Recv said it came on
}

func recvN(t *testing.T, tr transport.Transport, n int) []gotFrame {
	t.Helper()
	var got []gotFrame
	fs := make([]transport.Frame, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("received %d frames of %d", len(got), n)
		}
		k, err := tr.Recv(fs, 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs[:k] {
			g := gotFrame{whole: append(append([]byte(nil), f.Data...), f.Placed...), lane: f.Lane}
			if f.Placed != nil {
				g.placed = f.Placed
			}
			got = append(got, g)
		}
	}
	return got
}

// TestPlaceLanes: over 82599s keeping two queues for placement, the
// transport offers two lanes, one EtherType rule each. Frames sent to a
// lane take its postings in order (a span, a buffer of the transport's,
// a span), whatever arrives on lane 0 meanwhile; a lane's postings no
// frame took are cancelled; Close removes the rules.
func TestPlaceLanes(t *testing.T) {
	o := ixgbe.DefaultOptions()
	o.Placement, o.Queues, o.PlaceOnly = true, 3, 2
	o.MaxFrame = 1514 // frames of the MTU untagged: the lanes strip tags
	ns, p := nicpair.IXGBEOn(t, emulated.CableOptions{}, o)
	ts := nicpair.Transports(t, ns, nicpair.Raw)
	a, b := ts[0], ts[1]
	defer a.Close()
	pi := b.PlaceInfo()
	if pi.Head != 64-14 || pi.Lanes != 2 || !pi.SendsLanes || pi.Min != o.MaxFrame+4-64 || pi.LaneMin != o.MaxFrame-64 || b.MTU() != 1500 {
		t.Fatalf("PlaceInfo %+v, MTU %d: want head 50, 2 lanes, sends lanes, spans of %d (%d on a lane), MTU 1500", pi, b.MTU(), o.MaxFrame+4-64, o.MaxFrame-64)
	}
	regs, _ := p.Functions()[1].BAR(0)
	rules := func() int {
		n := 0
		for i := range hw.ETQFEntries {
			if regs.Read32(hw.ETQF(i))&hw.EtqfFilterEn != 0 {
				n++
			}
		}
		return n
	}
	if n := rules(); n != 2 {
		t.Fatalf("%d EtherType filters on, want 2 (one a lane)", n)
	}

	mem := make([]byte, 3*pi.Min)
	reg, err := b.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	spans := [][]byte{mem[:pi.Min], nil, mem[pi.Min : 2*pi.Min]}
	if k, err := b.Post(1, reg, spans); k != 3 || err != nil {
		t.Fatalf("Post on lane 1: %d, %v", k, err)
	}
	if s := b.Placement(1); s.Posted != 3 || s.Consumed != 0 || s.Ahead != 3 {
		t.Fatalf("lane 1 after posting: %+v", s)
	}
	frame := func(tag byte, n int) []byte {
		d := bytes.Repeat([]byte{tag}, n)
		d[0] = 0
		return d
	}
	send := []transport.Frame{
		{Peer: b.Addr(), Data: frame(1, 1000), Lane: 1},
		{Peer: b.Addr(), Data: frame(9, 300)}, // lane 0: takes none of lane 1's
		{Peer: b.Addr(), Data: frame(2, 700), Lane: 1},
		{Peer: b.Addr(), Data: frame(3, 1400), Lane: 1},
	}
	if k, err := a.Send(send); k != len(send) || err != nil {
		t.Fatalf("Send: %d, %v", k, err)
	}
	got := recvN(t, b, len(send))
	var lane []gotFrame
	for _, g := range got {
		if g.whole[len(g.whole)-1] == 9 {
			if g.placed != nil || len(g.whole) < 300 {
				t.Errorf("the lane-0 frame took a posting (%d bytes)", len(g.whole))
			}
			if g.lane != 0 {
				t.Errorf("the lane-0 frame came with Lane %d", g.lane)
			}
			continue
		}
		lane = append(lane, g)
	}
	if len(lane) != 3 {
		t.Fatalf("%d frames from lane 1, want 3", len(lane))
	}
	for i, g := range lane {
		want := send[[]int{0, 2, 3}[i]].Data
		if !bytes.Equal(g.whole[:len(want)], want) {
			t.Errorf("lane frame %d changed", i)
		}
		if g.lane != 1 {
			t.Errorf("lane frame %d came with Lane %d, want 1 (the lane it took postings on)", i, g.lane)
		}
		switch {
		case i == 1 && g.placed != nil:
			t.Errorf("lane frame 1 took a span: its posting was a buffer of the transport's")
		case i != 1 && (g.placed == nil || &g.placed[0] != &spans[i][0]):
			t.Errorf("lane frame %d did not land in its span", i)
		}
	}
	if s := b.Placement(1); s.Posted != 3 || s.Consumed != 3 || s.Ahead != 0 {
		t.Fatalf("lane 1 after its frames: %+v", s)
	}

	// Postings nobody sends to are taken back.
	if k, err := b.Post(2, reg, [][]byte{mem[:pi.Min], mem[pi.Min : 2*pi.Min]}); k != 2 || err != nil {
		t.Fatalf("Post on lane 2: %d, %v", k, err)
	}
	if err := b.Cancel(2); err != nil {
		t.Fatal(err)
	}
	if s := b.Placement(2); s.Consumed != s.Posted || s.Ahead != 0 {
		t.Fatalf("lane 2 after Cancel: %+v", s)
	}
	if err := b.Cancel(0); err == nil {
		t.Error("Cancel(0) accepted: lane 0 carries everything else")
	}
	// The lane works again after a cancel.
	if k, err := b.Post(2, reg, [][]byte{mem[2*pi.Min:]}); k != 1 || err != nil {
		t.Fatalf("Post on lane 2 after Cancel: %d, %v", k, err)
	}
	if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: frame(4, 900), Lane: 2}}); err != nil {
		t.Fatal(err)
	}
	if g := recvN(t, b, 1)[0]; g.placed == nil || &g.placed[0] != &mem[2*pi.Min] {
		t.Error("the frame to lane 2 after Cancel did not take its span")
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	// A region closed is not posted on, though the last Post used it.
	before := b.Placement(1)
	if k, err := b.Post(1, reg, [][]byte{mem[:pi.Min]}); k != 0 || err == nil {
		t.Errorf("Post of a closed region: %d, %v; want 0 and an error", k, err)
	}
	if s := b.Placement(1); s != before {
		t.Errorf("Post of a closed region changed lane 1: %+v, was %+v", s, before)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rules(); n != 0 {
		t.Errorf("%d EtherType filters left after Close", n)
	}
}
