package mx

import (
	"testing"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport/loopback"
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

// TestAskBackoffCountsOwnQuestions: an asker's wait doubles only for the
// questions it asked for itself (askDue, pull.askDue). One whose try
// found the window full of others' questions (and asked the newest again
// on their behalf), or every tag retired (askNumber refused: nothing went
// out), asks its own question once its undoubled wait passed since that
// try, and not before. Times are the board's clock as the askers are
// given it; each asker runs with the board's lock held, as its timer does.
func TestAskBackoffCountsOwnQuestions(t *testing.T) {
	type asker struct {
		ask  func(now int64)         // the asker's timer at now
		wait func(backoff int) int64 // its wait after backoff doublings
		own  func() bool             // whether its own question is waiting
		sent Counter                 // its questions sent
	}
	askers := map[string]func(pr *pair, p *partner) asker{
		"stream": func(pr *pair, p *partner) asker {
			r := &Request{} // unacked since the clock's start
			return asker{func(now int64) { p.askDue(now, r) }, p.askWait, func() bool { return p.askAt != 0 }, TailAsks}
		},
		"pull": func(pr *pair, p *partner) asker {
			pl, bl := &pull{p: p, e: pr.a}, &pblock{}
			return asker{func(now int64) { pl.askDue(now, bl) }, p.pullAskWait, func() bool { return pl.asking }, PullAsks}
		},
	}
	// Each fills the window of a partner that has asked nothing yet so
	// that the asker's next try does not ask a question of its own, and
	// then clears what stopped it (the peer's answers come).
	blocks := map[string]struct{ block, clear func(p *partner) }{
		"another's question asked again": {
			block: func(p *partner) {
				for range askWindow {
					p.askNumber(0) // others' questions, every one waiting
				}
			},
			clear: func(p *partner) { p.answerNumber(askTag(p.asked)) },
		},
		"every tag retired": {
			block: func(p *partner) {
				for range askWindow {
					p.askNumber(0)
				}
				for n := uint64(1); n <= askWindow; n++ {
					p.askCopy(n) // asked again: the copy's answer may come
				}
				for n := uint64(1); n <= askWindow; n++ {
					p.answerNumber(askTag(n))
				}
			},
			clear: func(p *partner) {
				for n := uint64(1); n <= askWindow; n++ {
					p.answerNumber(askTag(n)) // the copies' answers
				}
			},
		},
	}
	for an, newAsker := range askers {
		for bn, bc := range blocks {
			t.Run(an+"/"+bn, func(t *testing.T) {
				pr := newPair(t, factoryNamed(t, "loopback"), DefaultBoardOptions(), loopback.Faults{})
				b := pr.ba
				b.mu.Lock()
				defer b.mu.Unlock()
				p := pr.a.partners[partnerKey{pr.atob.NIC, pr.atob.Endpoint}]
				if p == nil || !p.ask || p.asked != 0 {
					t.Fatalf("partner %+v: want a peer that answers questions, none asked yet", p)
				}
				p.rtt.sample(100_000) // the round trips as measured: 100 µs, the waits far below RTOMax
				p.prtt.sample(100_000)
				a := newAsker(pr, p)
				sent := func() uint64 { return pr.a.cnt[a.sent] }
				bc.block(p)
				t0 := a.wait(0) + 1_000_000 // past the request's first wait
				before := sent()
				a.ask(t0)
				if a.own() {
					t.Fatalf("the try at %d asked its own question with the window blocked", t0)
				}
				tried := sent() - before // 1: another's asked again; 0: refused
				bc.clear(p)
				if a.ask(t0 + a.wait(0) - 1); sent() != before+tried {
					t.Fatalf("asked again %d ns after the try at %d, before its wait of %d", a.wait(0)-1, t0, a.wait(0))
				}
				if a.ask(t0 + a.wait(0)); !a.own() || sent() != before+tried+1 {
					t.Fatalf("no question of its own %d ns (its undoubled wait) after a try that asked none: the wait doubled for another's question or a refusal", a.wait(0))
				}
				// Its own question doubles the next wait.
				t1 := t0 + a.wait(0)
				if a.ask(t1 + a.wait(0)); sent() != before+tried+1 {
					t.Fatalf("its own question asked again after %d ns, not its doubled wait %d", a.wait(0), a.wait(1))
				}
				if a.ask(t1 + a.wait(1)); sent() != before+tried+2 {
					t.Fatalf("its own question not asked again after its doubled wait %d", a.wait(1))
				}
			})
		}
	}
}
