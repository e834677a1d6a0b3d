package mx

import (
	"testing"

	"github.com/gomx-dev/gomx/mx/wire"
)

// TestSackInsert checks the receiver's block list: kept in sequence order
// from the ack point (across the 14-bit wrap), fragments of one message
// merged into one block, and when full the farthest blocks left out.
func TestSackInsert(t *testing.T) {
	var s wire.Sack
	base := uint16(seqMask - 2) // the sequence numbers wrap after two
	for _, x := range []struct {
		seq  uint16
		held uint32
	}{{seqNext(seqNext(base)) + 3, 1}, {base + 1, 4}, {seqNext(seqNext(base)) + 3, 2}, {base + 1, 1}} {
		sackInsert(&s, x.seq&seqMask, x.held, base)
	}
	want := []wire.SackBlock{{Seq: base + 1, Held: 5}, {Seq: 2, Held: 3}} // 2: past the wrap
	if s.N != len(want) {
		t.Fatalf("%d blocks, want %d: %+v", s.N, len(want), s.Blocks[:s.N])
	}
	for i, b := range want {
		if s.Blocks[i] != b {
			t.Errorf("block %d = %+v, want %+v", i, s.Blocks[i], b)
		}
	}
	// Full: a nearer block pushes out the farthest; a farther one is left out.
	s.N = 0
	for i := range wire.SackMaxBlocks {
		sackInsert(&s, uint16(100+2*i), wire.SackWhole, 99)
	}
	sackInsert(&s, 200, wire.SackWhole, 99)
	sackInsert(&s, 101, wire.SackWhole, 99)
	if s.N != wire.SackMaxBlocks || s.Blocks[1].Seq != 101 || s.Blocks[s.N-1].Seq != 100+2*(wire.SackMaxBlocks-2) {
		t.Fatalf("full list: %+v", s.Blocks[:s.N])
	}
	for i := 1; i < s.N; i++ {
		if seqDiff(s.Blocks[i].Seq, 99) <= seqDiff(s.Blocks[i-1].Seq, 99) {
			t.Fatalf("blocks out of order: %+v", s.Blocks[:s.N])
		}
	}
}
