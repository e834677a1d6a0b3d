package mx

import (
	"math/bits"

	"github.com/gomx-dev/gomx/mx/wire"
)

// Asking a late peer what it holds (a gomx extension: wire.ExtAsk, the
// TRUC's probe flags).
//
// In a ping-pong nothing reveals a lost ping or pong: no later frame comes
// to open a hole, so only a timer can tell. A timer that resends (the
// tail-loss probe, the RTO: resend.go) has to guess how late the peer may
// be: on a loaded machine a peer runnable but descheduled answers
// milliseconds late on a wire that lost nothing, and a resend on such a
// guess is spurious recovery. A question needs no guess. Between two
// boards that both announce ExtAsk, a sender whose newest unacked message
// has waited askWait (twice the round trip, or srtt + 4·rttvar, plus a
// margin; a busy-polling board's first question about it, at most eight
// of its fastest round trips and one; no allowance for descheduling)
// sends a TRUC with TrucAsk and a tag (wire.TrucTagMask): its own ack,
// and a question. The receiver
// answers every question at once with a TRUC flagged TrucAnswer that
// carries the tag back: its ack and, with SACK, what it holds past it.
// A board handles one sender's frames in the order they come, so on a
// wire that keeps them in order (a transport may reorder: askWait) the
// answer reflects every frame the asker sent before the question: a message last sent before it that the
// answer neither acks nor lists as held was lost, and it is resent at
// once (counter AskRetransmits; only the oldest without SACK, which
// cannot say what is held past the ack point). A loss so costs askWait
// and a round trip.
//
// Toward such a peer the question replaces the tail-loss probe and the
// RTO: only an answer (or a SACK's hole, sack.go) resends, so a peer the
// machine keeps descheduled for however long costs questions, never a
// resend, and no timeout needs to guess the scheduler. A question or its
// answer can be lost too, and a late peer answers late: a question still
// unanswered after askWait is asked again, each wait doubled up to
// RTOMax, until the ack point moves; only the answer to the newest
// question resends (an earlier one's reflects less). The next
// question after an answer also waits askWait doubled, from the last one:
// an answer that resent what it showed missing is followed by a question
// when that resend is due. The answer's TRUC is read whole before the
// question is settled: its ack, and its SACK or the absence of one, which
// replaces whatever earlier SACKs said (sack.go's onSack), so a message
// the receiver reported and then dropped (an early packet it could not
// deliver when its turn came) is resent on the next answer. A peer whose
// messages all go unanswered is given up on by time (giveup.go). Messages
// sent before a question do not time the round trip when their ack comes
// (Karn's rule): it may have waited for an earlier message's recovery.
// Toward an Open-MX peer and a peer reached through the rings (they lose
// nothing while the peer lives, host.go) the probe and the RTO act. A
// gomx peer is asked before a round trip was measured too, after the
// RTO's fallback (askWait).
//
// A question is about a message the peer may not hold, and a PULL shows
// which it holds: a peer that pulls a large send's region holds its RNDV
// and every message sent before it, delivered in order (reliability.go,
// pulledAck). So the RNDV, and the messages of one frame sent before it,
// leave the unacked list as the first PULL arrives, however late the ack
// (lost, or due after the first PULLs): no question goes out about them
// in the middle of the pull, where on a receiver that places on lane 0
// each one would take a descriptor ahead of the spans (placerecv.go).
//
// A peer that pulls a send of ours is alive and taking our frames: while
// its PULLs keep coming, no question about the stream goes out. The
// messages still unacked then are those sent after the RNDV being pulled,
// most of them RNDVs its receiver acks as the batch that delivered them
// ends (ack.go's ackLarge). The PULLs of a pull come a window at a time,
// each window a round trip of the puller's after the last (75-390 µs on
// the emulated 82599 pair), often longer than askWait; so a question
// waits, past the last PULL served (partner.lastPulled), the stream's RTO
// (rto: at least RTOMin, with the descheduling allowance) or askWait if
// longer, as well as askWait past the message's send, though never more
// than RTOMax past that wait after the message's send. Once the pulls stop
// (or pause longer than that), asking resumes; a message lost meanwhile
// is found by that question, or sooner by a SACK's hole. This too is the
// sender's own bookkeeping: no frame changes.
//
// A pull asks the same way. A responder (the region's owner) answers the
// PULLs in the order they come and sends each one's replies before it
// handles the next frame, and every transport delivers one sender's
// frames in order; so a question that follows a puller's PULLs is
// answered after every reply to them has been sent, and when the answer
// arrives, a frame asked for by one of those PULLs that has not arrived
// was lost. A pull (large.go) whose oldest unfinished block has been
// silent for pullAskWait (longer while several replies are still due:
// askDue) sends a TRUC flagged TrucAsk and TrucPulls, with
// a tag (wire.TrucTagMask) from its partner's numbering (below), and
// notes the number of the last PULL sent before it. The owner answers
// every such question at once, whatever its ack state, with TrucAnswer,
// TrucPulls and the tag; the answer to the pull's outstanding question
// re-requests exactly the missing frames asked for up to that PULL
// (counter AskRetransmits; the frames in PullFramesRerequested), and
// nothing else. A wire that is only slow delivers the replies before the
// answer, so it never makes a pull ask again for anything; a peer that is
// descheduled answers late, and the pull, which sent nothing but
// questions meanwhile, re-requests nothing. An unanswered question (it or
// its answer lost, the peer late) is asked again after pullAskWait
// doubled, up to RTOMax; the answer to an earlier question (asked again
// since) is not this one's and is ignored.
//
// Which question an answer answers. The tag has four bits, and a peer
// kept from running for a while (half a second on a loaded 2-CPU VM) has
// dozens of questions to answer at once: with tags taken round and
// round, the answer to a question asked sixteen questions earlier, sent
// before the PULLs that followed it were handled and arriving ahead of
// their replies, carried the newest question's tag and re-requested
// every frame of those PULLs, each of which then arrived twice. So every
// question to a peer, the stream's and the pulls', has a number (its tag
// the low four bits), the peer answers them in the order they were sent,
// and the answer tagged t answers the first question after the last one
// answered whose number ends in t (answerNumber). No more than askWindow
// (16) questions wait for their answers at once, so no two of them share
// a tag: with sixteen waiting, an asker asks again its own newest question
// (same number; its answer shows only what was sent before the first
// copy), and one with none waiting asks the newest waiting question
// again without taking it as its own. No question is given up: its late
// answer would carry the tag of the one numbered sixteen later. A
// question asked again retires its tag until its copies' answers could
// no longer come (askNumber).
//
// A pull whose replies the NIC places on a lane (placerecv.go) asks too,
// but its replies come on the lane's queue and the answer on queue 0, so
// the answer may be handled before replies that came ahead of it on the
// wire, still in the lane's ring. Its answer is therefore acted on by the
// pull's timer, once the board drained its receive sources as for a
// verdict, in a drain that started after the answer was handled
// (verdict.go, mayActSince): every reply the NIC received before the
// answer has then been handled. A pull placing on lane 0 does not ask: each
// answer would take a descriptor ahead of its spans. Between boards that
// both announce ExtAsk a pull's timer so never re-requests blindly (but on
// lane 0); toward an Open-MX peer, or through the rings, it re-requests
// on its RTO.

// askBackoffMax bounds the doublings of askWait (which stops at RTOMax
// anyway) so the count cannot wrap.
const askBackoffMax = 32

// askable reports whether p may be asked, its messages' and its pulls'
// late answers alike: a gomx peer that announced ExtAsk, reached over a
// network path (not the rings), measured round trip or not.
func (p *partner) askable() bool {
	return p.ask && p.rtoMin() <= int64(p.ep.b.opts.RTOMin)
}

// askWait is how long the newest unacked message waits before an ask,
// after backoff doublings: max(2·srtt, srtt + 4·rttvar) plus half the
// receiver's delay of a tail's ack (tailAckDelay/2: 31 µs by default).
// On a busy-polling board the first question about a message (backoff 0)
// waits at most askSpread times the round trips' lower envelope (rtt.lo)
// plus a margin (askMargin). A transport may reorder (UDP on loopback
// can), and a question that overtakes its message has it resent for
// nothing; no transport says whether it reorders, and a floor for all of
// them (reorderAfter, with the descheduling allowance) made the in-process
// wire's p99 milliseconds. Before a round trip was measured it is the
// RTO's fallback (ResendDelay plus the descheduling allowance:
// unmeasured); at most RTOMax either way.
//
// A question resends nothing, so its wait needs no allowance for a peer
// the machine deschedules, and the estimate's variance is no reason to
// wait either: one sample of a descheduled peer (the first one, of the
// connect's exchanges, was 14-19 ms in an in-process busy-poll run at
// load 1-4) made srtt + 4·rttvar milliseconds for some hundred messages
// (one ack in eight gives a sample), and every loss among them cost that
// (an 8 B ping-pong at 1 % loss: round trips of 0.3-20 ms where 2 µs were
// due, each one an ask that waited so long, none a late timer). The
// envelope forgets such a sample at the next round trip. A question asked
// again waits the estimate, doubled: a lost message is found by the first
// question's answer, and only a peer that is late (or a question or
// answer lost, some hundredths of the losses) draws a second one; doubling
// from the cap, a peer descheduled for milliseconds drew a dozen questions
// where a sleeping board asks half a dozen.
// A board whose waiters sleep keeps the estimate: its round trips include
// wake-ups, some times its fastest (caught by polling), and a question
// wakes a sleeping peer; capped, lossless UDP ping-pongs asked about 6 % of
// their messages, where 1-5 % were asked before.
//
// A partner may never measure one: an RNDV's ack gives no sample (it may
// wait for the receive to be posted), so a sender of large messages alone
// measures nothing after its first small message, and when that one's
// round trip came too late to give a sample (a loaded machine, a probe
// that overtook it) the probe and the RTO had kept acting for the whole
// stream, resending RNDVs a descheduled receiver held (a lossless 1 MiB
// UDP stream at load 20-30: a probe and 8-24 timer resends).
func (p *partner) askWait(backoff int) int64 {
	b := p.ep.b
	var t int64
	if p.rtt.ok {
		t = max(2*p.rtt.srtt, p.rtt.srtt+4*p.rtt.rttvar)
		if backoff == 0 && b.capsAsks() {
			t = min(t, askSpread*p.rtt.lo) + p.askMargin()
		} else {
			t += b.tailAckDelay() / 2
		}
	} else {
		t = p.rto(b.opts.ResendDelay, 0)
	}
	for i := 0; i < backoff && t < int64(b.opts.RTOMax); i++ {
		t *= 2
	}
	return min(t, int64(b.opts.RTOMax))
}

// askSpread bounds askWait's estimate by the round trips' lower envelope:
// a question goes out at most this many of the peer's fastest round trips
// (plus the margin) after the message. Where the round trips vary
// several-fold with the machine's load (UDP on loopback, busy-polling:
// a lossless run's p99 5-90 µs from one run to the next), four of the
// fastest asked about up to a quarter of a lossless run's messages
// (87-757 questions over 3000 round trips, main's build 59-105); eight,
// 129-260 (2026-11-30 15:48 UTC, load 4.5-5.6).
const askSpread = 8

// askMargin is what a question waits past the estimate: half the
// receiver's delay of a tail's ack (tailAckDelay/2: 31 µs by default),
// for a sleeping board's fine timer, which fires at the deadline of every
// message sent (finetimer.go), most of them answered already: the margin
// keeps those wake-ups from coming every few round trips. A busy-polling
// board's waiters look at the deadlines themselves and arm no timer
// (finetimer.go, watched), so there it is the round trips' lower
// envelope (at most tailAckDelay/2): the waiter's clock readings, some
// looks apart, and the peer's handling. Spinning waiters give their CPU
// away once a reply is yieldAfter (20 µs) late (poll.go), and on a
// machine with other work a yield can cost another process's time slice,
// milliseconds: a loss asked about after 31 µs had both waiters yielding
// before the answer, one asked about after a few round trips is repaired
// before either yields. It is also the least askWait can be, whatever the
// estimate (noteTail).
func (p *partner) askMargin() int64 {
	b := p.ep.b
	m := b.tailAckDelay() / 2
	if b.capsAsks() && p.rtt.ok {
		m = min(m, p.rtt.lo)
	}
	return m
}

// capsAsks reports whether a question's wait is capped by the round
// trips' envelope: on a busy-polling board, but not in a timer run made
// for no waiter spinning on a reply (Board.uncapped). The cap is for such
// a waiter, which yields once the reply is late; the other runs (the
// fine timer's, the progress goroutine's, a waiter's for its own send's
// completion) come while the peer's reply may only be late, its own
// application descheduled or elsewhere, and a question there is two
// frames that repair nothing (a lossless busy-poll ping-pong over
// emulated 82574Ls, TestPingPongMMIOBoards, asked in about half its runs
// from them). Outside a timer run (a send noting its deadline for the
// fine timer, noteTail) the cap holds too. b.mu held.
func (b *Board) capsAsks() bool { return b.opts.BusyPoll && !b.uncapped }

// noteTail notes for the fine timer the deadline of r, which just went
// out (tailDue), unless the board has an earlier one noted already: its
// wait is at least askMargin (or RTOMax, if shorter) whatever the
// round-trip estimate (a probe's, toward a peer not asked, more), so a
// deadline noted before that bound past r's send stands, and noteDue
// would have kept it. In a ping-pong it nearly always does (the previous
// message's deadline, answered but not yet passed), so most sends skip
// the estimate's arithmetic. b.mu held.
func (p *partner) noteTail(r *Request) {
	b := p.ep.b
	if d := b.due.Load(); d != 0 && d <= r.lastSend+min(p.askMargin(), int64(b.opts.RTOMax)) {
		return
	}
	b.noteDue(p.tailDue(r))
}

// tailDue is the deadline to note for the fine timer when r goes out: the
// ask's toward a peer that answers, else the tail-loss probe's.
func (p *partner) tailDue(r *Request) int64 {
	if p.askable() {
		return r.lastSend + p.askWait(int(p.asks))
	}
	return r.lastSend + p.pto(0)
}

// askDue sends a question when t, the newest unacked request the peer
// does not hold whole, has waited askWait since its last send, since the
// last question (answered or not; askWait doubled for every question
// since the ack point last moved), and, once the peer pulled a send of
// ours, the stream's RTO (or askWait if longer) since the last PULL
// served (partner.lastPulled: see the package text above), and notes the
// deadline of the next one for the fine timer.
func (p *partner) askDue(now int64, t *Request) {
	wait := p.askWait(int(p.asks))
	due := max(t.lastSend, p.lastAsk) + wait
	if p.lastPulled != 0 {
		// The peer pulls a send of ours: no question while its PULLs
		// come less than the stream's RTO apart (see above), but none
		// held back past RTOMax beyond that wait after t's own send, so
		// that a frame lost during a long pull is still asked about
		// before the request's give-up time.
		hold := max(wait, p.rto(p.ep.b.opts.ResendDelay, 0))
		due = max(due, min(p.lastPulled+hold, t.lastSend+hold+int64(p.ep.b.opts.RTOMax)))
	}
	if now < due {
		p.ep.b.noteDue(due)
		return
	}
	p.lastAsk = now
	p.asks = min(p.asks+1, askBackoffMax)
	own := uint64(0)
	if p.askAt != 0 {
		own = p.askNum
	}
	num, fresh := p.askNumber(own)
	if fresh {
		p.askAt, p.askNum, p.askAgain = now, num, false
	} else if num != 0 {
		p.askAgain = true
	}
	p.ep.b.noteDue(now + p.askWait(int(p.asks)))
	if num == 0 {
		return
	}
	p.ep.cnt[TailAsks]++
	p.sendTruc(wire.TrucAsk | askTag(num)<<wire.TrucTagShift)
}

// askWindow is how many questions to a peer may wait for their answers
// at once: as many as their tags tell apart.
const askWindow = wire.TrucTagMask>>wire.TrucTagShift + 1

// askTag is the tag of question number num.
func askTag(num uint64) uint8 { return uint8(num) & (askWindow - 1) }

// askNumber returns the number of the next question to p, and whether it
// is a new one. Questions are numbered in the order they go out, and p
// answers them in that order, so the answer tagged t answers the first
// question after the last one answered whose number ends in t: no two
// questions whose answers may still come may share a tag. With askWindow
// waiting (or the next number's tag retired, below), the asker asks again own, its own question still waiting
// (fresh false: the answer may be the earlier copy's, and reflects only
// what was sent before it), or, with none, the newest waiting question,
// which it does not take as its own: its answer settles the window, and
// the asker asks its own question when its timer comes again. No
// question is given up while waiting: its late answer would carry the
// tag of the question numbered askWindow later. A question asked again
// retires its tag (askCopy) until an answer shows its copies' answers
// can no longer come; a new number with a retired tag is not asked (a
// waiting question is asked again, as with askWindow waiting), or, with
// none waiting, it is skipped as answered. With every tag retired and
// none waiting, nothing is asked (num 0), askRefuseMax times in a row at
// most, so copies' answers that were lost cannot stop the questions.
func (p *partner) askNumber(own uint64) (num uint64, fresh bool) {
	for skips := 0; ; skips++ {
		retired := skips < askWindow && p.retired(p.asked+1)
		blocked := p.asked-p.answered >= askWindow || retired
		switch {
		case blocked && own > p.answered:
			num = own
		case blocked && p.asked > p.answered:
			num = p.asked
		case retired:
			p.asked++
			p.answered = p.asked // never asked: nothing to answer
			continue
		case skips >= askWindow && p.refused < askRefuseMax:
			p.refused++
			return 0, false // every tag retired: ask when a copy's answer came
		default:
			p.refused = 0
			p.asked++
			return p.asked, true
		}
		p.askCopy(num)
		return num, false
	}
}

// askRefuseMax is how many times in a row askNumber refuses a question
// with every tag retired before it asks one anyway.
const askRefuseMax = 64

// askCopy notes that question num goes out again: until an answer to a
// question asked after this copy comes (the peer answers in order), an
// answer with num's tag once num is settled is a copy's and answers
// nothing.
func (p *partner) askCopy(num uint64) {
	c := &p.copies[askTag(num)]
	if c.num != num {
		old := 0
		if c.num != 0 {
			old = c.n + c.old // an earlier question's copies' answers still due, ahead of num's
		}
		*c = askCopies{num: num, old: old}
	}
	c.bound = p.asked
	c.n++
}

// retired reports whether question number num may not be asked: its tag
// is that of an earlier question asked again whose copies' answers may
// still come.
func (p *partner) retired(num uint64) bool {
	c := p.copies[askTag(num)]
	return c.num != 0 && c.num < num
}

// askCopies is a question asked more than once (askCopy): its number,
// the last number asked when its last copy went out, and how many copies
// went out after the first (so at most as many answers may still come
// once it is settled).
type askCopies struct {
	num, bound uint64
	n, old     int
}

// answerNumber returns the number of the question an answer tagged tag
// answers: the first one after the last answered with that tag; false
// when none such was asked (a duplicate, or an answer from before the
// window moved past it) or the answer is a settled question's copy's.
// A question's retirement ends when as many answers as it had copies
// came after it was settled, or an answer to a question asked after its
// last copy went out (the peer answers in order).
func (p *partner) answerNumber(tag uint8) (uint64, bool) {
	if c := &p.copies[tag&(askWindow-1)]; c.old > 0 {
		c.old--
		return 0, false
	}
	if c := &p.copies[tag&(askWindow-1)]; c.num != 0 && c.num <= p.answered {
		if c.n--; c.n == 0 {
			*c = askCopies{} // every copy's answer came
		}
		return 0, false
	}
	n := p.answered + 1 + uint64((tag-askTag(p.answered+1))&(askWindow-1))
	if n > p.asked {
		return 0, false
	}
	p.answered = n
	for i, c := range p.copies {
		if c.num != 0 && c.bound < n {
			p.copies[i] = askCopies{}
		}
	}
	return n, true
}

// onProbe handles the probe flags of a TRUC from p, after its ack and SACK
// were applied: an answer reveals what was lost, an ask is answered.
func (p *partner) onProbe(h *wire.Truc) {
	pulls := h.Probe&wire.TrucPulls != 0
	if h.Probe&wire.TrucAnswer != 0 {
		num, ok := p.answerNumber(h.Probe & wire.TrucTagMask >> wire.TrucTagShift)
		switch {
		case !ok:
		case pulls:
			p.onPullAnswer(num)
		case num == p.askNum:
			p.onAnswer()
		}
	}
	if h.Probe&wire.TrucAsk != 0 {
		p.ep.cnt[AsksAnswered]++
		p.sendTruc(wire.TrucAnswer | h.Probe&(wire.TrucPulls|wire.TrucTagMask)) // the tag goes back
	}
}

// onAnswer resends what the answer to the newest question shows lost:
// every unacked message last sent before the question that the peer does
// not hold whole (only the oldest without SACK, which cannot say what the
// peer holds past its ack point). The answer's own ack, applied first, may
// have moved the ack point: what it leaves unacked was still lost.
func (p *partner) onAnswer() {
	at := p.askAt
	if at == 0 {
		return // answered already (a duplicate of the answer)
	}
	p.askAt = 0
	if d := p.ep.b.now() - at; d > p.rtt.lo && !p.askAgain {
		// The peer answers at once: a question asked too soon (every
		// message's, were the round trip to grow past askWait for good)
		// lifts the envelope, where the messages it covers give no
		// sample (Karn). A question asked again under its number is
		// left out: askAt is its first copy's, and the time includes
		// the backoff the loss of that copy cost. (p.asks cannot tell:
		// the answer's ack, applied first, zeroes it.)
		p.rtt.noteLo(d)
	}
	k := 0
	for r := p.unacked.Front(); r != nil && k < resendBurst; r = r.q.Next() {
		if r.lastSend >= at || p.sackedWhole(r) {
			continue
		}
		p.resendMissing(r, AskRetransmits, r.sackHeld) // all it lacks: each was sent before the question
		k++
		if !p.sack {
			break
		}
	}
}

// askable reports whether pl asks its partner about late replies instead
// of re-requesting on its timer: toward a peer that answers (askable),
// unless the NIC places its replies on lane 0, where every answer would
// take a descriptor ahead of its spans (placerecv.go) and move each reply
// after it off its own.
func (pl *pull) askable() bool {
	return pl.p.askable() && (pl.pp == nil || pl.pp.lane > 0)
}

// pullAskWait is how long a pull block's silence lasts before a question
// to p, after backoff doublings: as askWait on a sleeping board (no cap
// by the fastest round trips, the tail-ack margin), from the pull path's
// round trip (a PULL to its first reply), or the pull RTO before one was
// measured; at most RTOMax.
func (p *partner) pullAskWait(backoff int) int64 {
	b := p.ep.b
	t := p.pullRTO(0)
	if p.prtt.ok {
		t = max(2*p.prtt.srtt, p.prtt.srtt+4*p.prtt.rttvar) + b.tailAckDelay()/2
	}
	for i := 0; i < backoff && t < int64(b.opts.RTOMax); i++ {
		t *= 2
	}
	return min(t, int64(b.opts.RTOMax))
}

// plateRTTs caps the lateness askDue allows for, in pull round trips
// (partner.prtt's srtt): a run of lost replies at a pull's tail costs
// at most this more than one lost reply.
const plateRTTs = 8

// frameSeq is the number of the PULL that last asked for frame x of bl:
// the one that asked for it again, if any (an earlier copy of an amb
// frame may come too, but taking the later number errs toward asking).
func (pl *pull) frameSeq(bl *pblock, x int) uint32 {
	if bl.fast&(1<<x) != 0 {
		return bl.fseq[x]
	}
	return bl.seq
}

// expectsSeveral reports whether pl still expects replies that could
// each come though the others were lost: at least two frames asked for
// after the newest reply to come (pull.top), a PULL none of whose frames
// came counting as one (it may be the PULL that was lost). Frames asked
// for before that reply and still missing are holes, lost more likely
// than late, and count for nothing. With independent losses a silence
// of the pull is then every one of them lost, as likely as two losses
// in a row (1e-4 at 1 % loss), or its owner late: on a loaded machine,
// nearly always the owner.
func (pl *pull) expectsSeveral() bool {
	n := 0
	var other uint32 // a later PULL counted already
	for j := range pl.blocks {
		bl := &pl.blocks[j]
		for m := ^bl.got & (uint64(1)<<bl.n - 1); m != 0; m &= m - 1 {
			x := bits.TrailingZeros64(m)
			a := askedAt{pl.frameSeq(bl, x), bl.first + x}
			switch {
			case !pl.top.before(a): // a hole
				continue
			case a.te == pl.top.te: // its PULL reached the owner
			case other == 0:
				other = a.te
			case a.te == other:
				continue
			}
			if n++; n >= 2 {
				return true
			}
		}
	}
	return false
}

// askDue sends the pull's question when bl, its oldest unfinished block,
// has been silent for pullAskWait since it was last asked for, the pull
// last progressed and the last question went out; while the pull still
// expects several replies (expectsSeveral), for an allowance more: three
// times the longest silence amid one PULL's replies that a reply asked
// for once ended lately (partner.plate), or the descheduling allowance
// (descheduled.go) if longer, at most plateRTTs pull round trips (and
// RTOMax in all). A question resends nothing, but a lossless wire on a
// loaded machine asked several per 1 MiB message about an owner kept
// from sending for a millisecond or more; the owner's own silences tell
// how late it is better than this process's gaps, which were shorter
// than them several-fold. The cap keeps a run of replies lost at the
// tail (a receive queue that overflowed and dropped the rest of a
// burst), which only the question reveals, from waiting out a stall
// or pulls queued behind each other at one owner. A single loss only the
// question reveals (the last frame, a lost PULL of one of the last two
// blocks) leaves one reply due or none, and is asked about after
// pullAskWait alone.
func (pl *pull) askDue(now int64, bl *pblock) {
	p := pl.p
	from := max(bl.lastReq, pl.lastProgress, pl.askAt)
	wait := p.pullAskWait(pl.asks)
	if now < from+wait {
		return
	}
	p.plate.rotate()
	allow := min(max(descheduling.slack(), p.plate.slack()), plateRTTs*p.prtt.srtt)
	if now < from+min(wait+allow, int64(p.ep.b.opts.RTOMax)) && pl.expectsSeveral() {
		return // the owner is more likely late than every reply due lost
	}
	own := uint64(0)
	if pl.asking {
		own = pl.askNum
	}
	num, fresh := p.askNumber(own)
	if fresh {
		pl.askNum, pl.askReq = num, pl.reqs
		pl.asking = true
	}
	pl.askAt = now
	pl.asks++
	if num == 0 {
		return
	}
	pl.e.cnt[PullAsks]++
	p.sendTruc(wire.TrucAsk | wire.TrucPulls | askTag(num)<<wire.TrucTagShift)
}

// onPullAnswer takes the answer to question number num about pulls from
// p: the pull whose outstanding question it answers re-requests the
// missing frames asked for by the PULLs sent before that question.
func (p *partner) onPullAnswer(num uint64) {
	e := p.ep
	now := e.b.now()
	for _, pl := range e.pulls {
		if pl == nil || pl.p != p || !pl.asking || pl.askNum != num {
			continue
		}
		pl.asking = false
		pl.asks = 0
		if pl.pp != nil {
			// Placed: the replies ahead of the answer may still wait in
			// the lane's ring. The timer acts once it was drained.
			pl.answered = true
			pl.answerGen = e.b.drainGen
			e.b.noteDue(now)
			continue
		}
		pl.onAnswer(now)
	}
}

// onAnswer re-requests the missing frames asked for by the PULLs sent
// before the pull's answered question.
func (pl *pull) onAnswer(now int64) {
	e := pl.e
	n := e.cnt[PullRerequests]
	pl.lostBefore(pl.askReq+1, 0, AskRetransmits, evidenceAll)
	if e.cnt[PullRerequests] != n && len(pl.blocks) > 0 {
		pl.blocks[0].lastReq = now // the next question waits from the re-request
	}
}
