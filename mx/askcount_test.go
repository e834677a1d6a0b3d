package mx

import (
	"testing"

	"github.com/gomx-dev/gomx/mx/wire"
)

// TestAnswersSettleEarlierQuestions: the peer answers questions in the
// order asked, so an answer settles its own question and every one asked
// before it (answerNumber). A question or answer lost on the way stops counting as owed
// (partner.asked less answered, which a placed pull on lane 0 counts
// ahead of its spans) at the next answer, and a duplicate answer settles
// nothing more.
func TestAnswersSettleEarlierQuestions(t *testing.T) {
	p := &partner{}
	ask := func() { p.askNumber(0) } // as askDue and the pull's question number theirs
	answer := func(tag uint8) {
		p.onProbe(&wire.Truc{Probe: wire.TrucAnswer | tag<<wire.TrucTagShift})
	}
	owed := func() uint64 { return p.asked - p.answered }
	for range 3 {
		ask() // tags 1, 2, 3
	}
	answer(2) // the first answer was lost: the second settles both
	if got := owed(); got != 1 {
		t.Fatalf("after the second answer of three: %d owed, want 1", got)
	}
	answer(2) // a duplicate
	if got := owed(); got != 1 {
		t.Fatalf("after a duplicate answer: %d owed, want 1", got)
	}
	answer(3)
	if got := owed(); got != 0 {
		t.Fatalf("after the last answer: %d owed, want 0", got)
	}
	for range 20 { // tags wrap past 15
		ask()
	}
	answer(askTag(p.asked))
	if got := owed(); got != 0 {
		t.Fatalf("after the newest answer, tags wrapped: %d owed, want 0", got)
	}
	ask()
	ask()
	answer(askTag(p.asked - 1))
	if got := owed(); got != 1 {
		t.Fatalf("after the older of two answers: %d owed, want 1", got)
	}
}
