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

// TestAskWindowFullWithAnswersLost fills the questions' window and loses
// every answer: an asker with no question waiting asks the newest again
// (it does not take it as its own, nor gives any question up, whose late
// answer would carry a new question's tag); that answer empties the
// window, and the next question is a new one. A question asked again
// retires its tag: a copy's answer coming after the question was settled
// answers nothing, and no new question takes the tag until that answer
// came or one to a question asked after the copy did.
func TestAskWindowFullWithAnswersLost(t *testing.T) {
	p := &partner{}
	for range askWindow {
		if _, fresh := p.askNumber(0); !fresh {
			t.Fatal("a question with the window not full was not a new one")
		}
	}
	newest := p.asked
	num, fresh := p.askNumber(0) // every answer so far lost
	if fresh || num != newest {
		t.Fatalf("window full, no question of the asker's own: asked %d (new %v), want the newest, %d, again", num, fresh, newest)
	}
	if got, ok := p.answerNumber(askTag(newest)); !ok || got != newest {
		t.Fatalf("the answer to the newest question taken for %d (%v), want %d", got, ok, newest)
	}
	if owed := p.asked - p.answered; owed != 0 {
		t.Fatalf("after the newest question's answer: %d owed, want 0", owed)
	}
	next, fresh := p.askNumber(0)
	if !fresh || next != newest+1 {
		t.Fatalf("after the window emptied: asked %d (new %v), want a new question %d", next, fresh, newest+1)
	}
	for p.asked < newest+askWindow-1 {
		p.askNumber(0)
	}
	// The next number has the copied question's tag: not asked while the
	// copy's answer may come; the newest waiting question is asked again.
	if num, fresh := p.askNumber(0); fresh || num != p.asked {
		t.Fatalf("next number's tag retired: asked %d (new %v), want the newest, %d, again", num, fresh, p.asked)
	}
	if got, ok := p.answerNumber(askTag(newest)); ok {
		t.Fatalf("the copy's answer taken for question %d", got)
	}
	if num, fresh := p.askNumber(0); !fresh || askTag(num) != askTag(newest) {
		t.Fatalf("after the copy's answer: asked %d (new %v), want a new one with tag %d", num, fresh, askTag(newest))
	}
	if got, ok := p.answerNumber(askTag(next)); !ok || got != next {
		t.Fatalf("the answer to %d taken for %d (%v)", next, got, ok)
	}
}

// TestAskCopyAfterRefusals: every tag retired by a question asked twice
// whose copy's answer has not come, and nothing waiting, askNumber
// refuses askRefuseMax times and then asks anyway; a question asked then
// and asked again takes over a retired tag's record, and the late answer
// to the earlier question's copy must still answer nothing.
func TestAskCopyAfterRefusals(t *testing.T) {
	p := &partner{}
	for range askWindow {
		p.askNumber(0)
	}
	for n := uint64(1); n <= askWindow; n++ {
		p.askCopy(n) // each asked again
	}
	for n := uint64(1); n <= askWindow; n++ {
		if got, ok := p.answerNumber(askTag(n)); !ok || got != n {
			t.Fatalf("the answer to %d taken for %d (%v)", n, got, ok)
		}
	}
	for i := range askRefuseMax {
		if num, _ := p.askNumber(0); num != 0 {
			t.Fatalf("refusal %d: asked %d with every tag retired", i, num)
		}
	}
	f, fresh := p.askNumber(0)
	if !fresh || f == 0 {
		t.Fatalf("after %d refusals: asked %d (new %v), want a new question", askRefuseMax, f, fresh)
	}
	if again, _ := p.askNumber(f); again != f {
		t.Fatalf("question %d asked again as %d", f, again)
	}
	old := f - askWindow // the earlier question with f's tag
	if got, ok := p.answerNumber(askTag(old)); ok {
		t.Fatalf("the late answer to %d's copy taken for %d", old, got)
	}
	if got, ok := p.answerNumber(askTag(f)); !ok || got != f {
		t.Fatalf("the answer to %d taken for %d (%v)", f, got, ok)
	}
}
