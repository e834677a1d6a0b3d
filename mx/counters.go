package mx

// Counter names one statistic of an endpoint or board, like a line of
// Open-MX's omx_counters.
type Counter int

// Counters kept per endpoint (and, for frames that reach no endpoint, per
// board).
const (
	SendTiny Counter = iota
	SendSmall
	SendMediumFrag
	SendRndv
	SendPull
	SendPullReply
	SendNotify
	SendConnectRequest
	SendConnectReply
	SendTruc
	SendNackLib
	SendNackMCP
	RecvTiny
	RecvSmall
	RecvMediumFrag
	RecvRndv
	RecvPull
	RecvPullReply
	RecvNotify
	RecvConnectRequest
	RecvConnectReply
	RecvTruc
	RecvNackLib
	RecvNackMCP
	Resends
	ConnectResends
	PullRerequests
	PullTimeouts
	AcksImmediate
	AcksDelayed
	AcksPiggybacked
	DupMessages
	DupFrags
	DupPullReplies
	EarlyStored
	ObsoleteDropped
	DropBadHeader
	DropBadChecksum
	DropUnknownType
	DropUnknownPeer
	DropBadEndpoint
	DropEndpointClosed
	DropBadSession
	DropBadSeq
	DropBadKey
	DropBadPull
	DropBadPullReply
	DropBadNack
	DropStaleAck
	DropUnexpectedFull
	DropEarlyFull
	DropNoPartner
	UnexpectedQueued
	UnexpectedHandled
	Unreachable
	SendErrors
	SendsQueued
	PullsQueued
	RecvHostQuery
	RecvHostReply
	RecvRaw
	DropRawFull
	HeldProgressionOff
	NacksUnconfirmed
	SendLocal // messages handed to an endpoint of this process (local.go)
	RecvLocal
	RecvCMA    // large messages copied once from another process (cma.go)
	CMARefused // process_vm_readv refused by the kernel: pulled through the rings
	CMAFailed  // process_vm_readv failed otherwise (bad entry, short copy): pulled
	// Loss recovery (docs/loss-recovery.md). A timer retransmit is a resend or pull
	// re-request made because a timeout expired; a fast retransmit is one
	// made on evidence (later frames arrived, or a selective ack named a
	// hole) before any timer. DupReceived counts every duplicate that
	// arrived here (messages, medium frags, pull replies): on a wire that
	// does not duplicate frames, these are the peer's spurious
	// retransmits. PullFramesRerequested counts pull-reply frames asked
	// for again, whichever way.
	FastRetransmits
	TimerRetransmits
	DupReceived
	PullFramesRerequested
	// TailProbes counts tail-loss probes: the last frame of the newest
	// unacked message sent again when the oldest one's timeout expired,
	// before anything is resent in full.
	TailProbes
	// SacksSent counts the TRUCs sent with a selective ack (sack.go):
	// at once because a frame arrived past a hole, or any ack sent while
	// holes remain; SacksReceived the selective acks a sender took.
	SacksSent
	SacksReceived
	// Large messages between processes of this host copied out of the
	// sender's shared pool (shmpool.go, offload.go).
	RecvShared      // by the CPU
	RecvEngine      // by the copy engine
	EngineFallbacks // the engine failed: copied again by the CPU
	SharedNotPassed // pool segments not passed to the peer: sent another way
	// Pull-reply fragments copied into the receive buffer by the copy
	// engine from held transport frames (pulloffload.go), and those the
	// CPU copied again because the engine failed.
	RecvPullEngine
	PullEngineFallbacks
	// CMAReads counts process_vm_readv calls (cma.go): the receiver's
	// reads of a sender's endpoint table, region entries and message
	// data. A large message copied once costs one (its entry and all its
	// data), two when it lies elsewhere than the sender endpoint's last
	// two messages did, plus one per sender endpoint the first time.
	CMAReads
	// Verdicts (verdict.go): frames a timer's drain handled before it
	// declared a peer or a pull dead, and verdicts put off because another
	// goroutine owned a source's Recv.
	VerdictDrainFrames
	VerdictsDeferred
	// BoardStalls counts the gaps between timer runs long enough to be a
	// stall of the board itself (its process descheduled): their time is
	// not counted as a peer's silence (liveness.go).
	BoardStalls
	// How large messages end when their pull cannot (largefail.go):
	// pulls this receiver gave up (each answered with a NOTIFY that says
	// so), large sends completed with ErrPullFailed on such a NOTIFY, and
	// large sends failed because neither a PULL nor the NOTIFY came for
	// the notify timeout after the receiver had started pulling.
	PullsAbandoned
	SendsPullFailed
	NotifyTimeouts
	// The lean path for ring peers (lean.go): eager sends of one frame
	// completed once in the peer's ring, with no resend state; and such
	// messages a receiver held because it could not take them at once
	// (unexpected queue full, progression disabled), to deliver later.
	LeanSends
	LeanHeld
	// EngineByTests counts the engine copies (RecvEngine among them) that
	// the application's Tests finished, with nobody woken for them
	// (enginereap.go).
	EngineByTests
	// The lane (lane.go): lean sends written as lane records, and lane
	// records a receiver copied straight into a matching posted receive.
	LaneSends
	LaneRecvs
	// DueDrainFrames counts frames a timer run handled before it ran the
	// retransmission timers whose deadline had passed (finetimer.go):
	// answers that waited unread in a queue, which would otherwise have
	// been resent.
	DueDrainFrames
	// Asking a late peer what it holds (ask.go): asks sent, asks
	// answered, and messages resent because an answer showed them lost.
	// An ask resends nothing: it is not a recovery action, and a lossless
	// wire whose peer is late counts asks and answers but no resends.
	TailAsks
	AsksAnswered
	AskRetransmits
	// PullAsks counts the questions a puller sent the region's owner
	// about replies that were late (ask.go); the frames an answer shows
	// lost are counted as AskRetransmits and PullFramesRerequested.
	PullAsks
	// FineArms counts the times the fine timer's timerfd was set
	// (timerfd_settime), and FineFirings the times it fired and its
	// goroutine ran (finetimer.go).
	FineArms
	FineFirings
	// FineIdle counts the fine timer's firings that found nothing due
	// (the deadline it was set for had moved or gone), and SleepsEmpty
	// the board's sleeps that ended with nothing to do: a wait of the
	// receive loop or of a waiter asleep on the sources that timed out
	// with no frame, no hand-over and no wake-up (finetimer.go).
	FineIdle
	SleepsEmpty
	// The short path (short.go): tiny and small messages sent, and
	// received into the first posted receive, by its two functions.
	ShortSends
	ShortRecvs
	// PlaceRealigns counts the blocks a pull placing on lane 0 posted
	// behind spare pool descriptors, for the replies of earlier blocks
	// that frames nobody counted had pushed past their spans
	// (placerecv.go).
	PlaceRealigns
	// PlaceLaneCancels counts the times a pull had the transport take
	// its lane's postings back (placerecv.go, placeCancel): when it held
	// replies waiting on postings and no frame was owed on the lane any
	// more to take them (placeFlush: replies lost before the NIC left
	// them), from the pull's timer once the pull was silent and the
	// sources drained (a cancel that failed before, or what is still
	// owed), and as it ended with postings left on its lane (placeEnd);
	// a cancel with nothing posted is not counted.
	// PlaceCancelErrors counts the cancels the transport failed (the
	// postings stay, and the copies that wait on them wait for the NIC to
	// consume them). PlaceSpoiled counts the placed frames dropped because
	// a copy kept before them may have been written over their span
	// (placerecv.go, Checking): replies that would otherwise have been
	// kept, and other frames.
	PlaceLaneCancels
	PlaceSpoiled
	PlaceCancelErrors
	// PlaceHeld counts the replies a pull placing on a lane received
	// whole where their place in the receive buffer was not yet safe to
	// write (a reply lost before the NIC moves each later one into the
	// span before its own), kept where they landed and copied to their
	// place once it was (placerecv.go, Holding), instead of being asked
	// for again. PlaceAside counts those of them copied aside, a second copy: a
	// reply copied from lane 0 whose place was not safe yet, and a held
	// reply moved out of the way of a copy that could not wait.
	PlaceHeld
	PlaceAside
	// PulledAcks counts the sent messages taken as acked because the
	// receiver pulled (or notified) a large send's region before their
	// ack came: the RNDV, and the messages of one frame sent before it
	// (reliability.go, pulledAck). No question, probe or resend goes out
	// for them afterwards.
	PulledAcks
	// Staged large messages between processes of this host (stage.go):
	// sends that went through a staging buffer, the chunks the sender
	// copied into one (its stager goroutine and its waiters), receives
	// completed from a staging buffer, and the chunks such a receive read
	// with process_vm_readv straight from the sender's buffer instead
	// (claimed from the top, or taken over from a sender that stalled).
	StagedSends
	StagedChunks
	StagedRecvs
	StagedCMAChunks
	numCounters
)

var counterNames = [numCounters]string{
	"send tiny", "send small", "send medium frag", "send rndv", "send pull", "send pull reply",
	"send notify", "send connect request", "send connect reply", "send truc (ack)", "send nack lib",
	"send nack mcp",
	"recv tiny", "recv small", "recv medium frag", "recv rndv", "recv pull", "recv pull reply",
	"recv notify", "recv connect request", "recv connect reply", "recv truc (ack)", "recv nack lib",
	"recv nack mcp",
	"resent messages", "resent connects", "pull blocks re-requested", "pull timeouts",
	"acks sent immediately", "acks sent after delay", "acks piggybacked",
	"duplicate messages", "duplicate medium frags", "duplicate pull replies",
	"early packets stored", "obsolete packets dropped",
	"drop bad header", "drop bad checksum", "drop unknown type", "drop unknown peer",
	"drop bad endpoint", "drop endpoint closed", "drop bad session", "drop bad seqnum",
	"drop bad key", "drop bad pull", "drop bad pull reply", "drop bad nack", "drop stale ack",
	"drop unexpected queue full", "drop early queue full", "drop no partner",
	"unexpected messages queued", "unexpected messages handled by handler",
	"partners declared unreachable", "transport send errors",
	"sends queued for a region", "pulls queued for a handle",
	"recv host query", "recv host reply", "recv raw", "drop raw queue full",
	"messages held while progression is disabled", "nacks answered by a resend (unconfirmed)",
	"send local (same process)", "recv local (same process)",
	"recv large by process_vm_readv (one copy)", "process_vm_readv refused (pulled)",
	"process_vm_readv failed (pulled)",
	"fast retransmits", "timer retransmits", "duplicates received (spurious retransmits)",
	"pull frames re-requested", "tail-loss probes",
	"selective acks sent", "selective acks received",
	"recv large from a shared segment (one CPU copy)", "recv large from a shared segment by the copy engine",
	"copy engine failed (copied by the CPU)", "shared segments not passed to the peer",
	"recv pull reply copied by the copy engine", "copy engine failed on a pull reply (copied by the CPU)",
	"process_vm_readv calls",
	"frames drained before a verdict", "verdicts deferred (a source was busy)",
	"board stalls (not counted as a peer's silence)",
	"pulls abandoned (notified as failed)", "large sends failed by the receiver's pull",
	"large sends failed: no pull or notify in time",
	"lean sends (ring peers: completed in the ring, never resent)", "lean messages held (taken later)",
	"copy engine copies finished by Tests (nobody woken)",
	"lane sends (lane records written into the ring)", "lane receives (straight into a posted receive)",
	"frames drained by a timer run before it resent",
	"tail asks sent (a late peer asked what it holds)", "asks answered", "resent on an ask's answer",
	"pull asks sent (a late pull's owner asked what it sent)",
	"fine timer arms (timerfd_settime)", "fine timer firings",
	"fine timer firings with nothing due", "sleeps ended by a timeout with nothing to do",
	"short-path sends (tiny, small)", "short-path receives (straight into the first posted receive)",
	"placed blocks realigned behind spare descriptors",
	"placing lanes cancelled (postings taken back)", "placed frames dropped: a copy may have written over their span",
	"placing lane cancels failed",
	"placed replies held until their place was safe", "held replies copied aside",
	"sends taken as acked by a pull of their region",
	"large sends staged", "chunks copied into a staging buffer by the sender",
	"recv large through a staging buffer", "staged chunks read by process_vm_readv",
}

// String returns the counter's label.
func (c Counter) String() string {
	if c < 0 || c >= numCounters {
		return "unknown counter"
	}
	return counterNames[c]
}

// NumCounters is the number of counters in a Counters snapshot.
const NumCounters = int(numCounters)

// Counters is a snapshot of every counter, indexed by Counter.
type Counters [numCounters]uint64

// Get returns one counter.
func (c Counters) Get(k Counter) uint64 { return c[k] }

// NonZero calls fn for every non-zero counter in order, like omx_counters -q.
func (c Counters) NonZero(fn func(k Counter, v uint64)) {
	for i, v := range c {
		if v != 0 {
			fn(Counter(i), v)
		}
	}
}

// laneTally holds the counts an 8-byte message through a lane or the lean
// path adds to (lean.go, lane.go, partner.piggyback), on one cache line of
// its endpoint (TestHotLines) where Counters' slots for them lie on five,
// and those of lane records queued as unexpected (laneUnexp) on the next,
// with the endpoint's unexpected handler: Endpoint.Counters adds them in.
type laneTally struct {
	// lean are the lean sends by class (tiny, small, medium), counted
	// as those sends and as LeanSends; lanes those that went as lane
	// records (LaneSends).
	lean  [3]uint64
	lanes uint64
	// recv are the lane records laneFast delivered, by class, counted
	// as receives of the class and as LaneRecvs.
	recv [3]uint64
	// piggybacked: AcksPiggybacked.
	piggybacked uint64
	// unexp are the lane records laneUnexp queued, by class, counted as
	// receives of the class only (the general path delivers them).
	unexp [3]uint64
}

// laneTally's arrays are indexed by msgClass (lean) and by a receive
// counter less RecvTiny (recv, unexp): this fails to compile unless
// those run tiny, small, medium from 0 and RecvTiny, RecvSmall,
// RecvMediumFrag one after another.
func _() {
	var x [1]struct{}
	_ = x[classTiny-0]
	_ = x[classSmall-1]
	_ = x[classMedium-2]
	_ = x[RecvSmall-RecvTiny-1]
	_ = x[RecvMediumFrag-RecvTiny-2]
}

// addTo adds t's counts to c.
func (t *laneTally) addTo(c *Counters) {
	for i, k := range [3]Counter{SendTiny, SendSmall, SendMediumFrag} {
		c[k] += t.lean[i]
		c[LeanSends] += t.lean[i]
	}
	c[LaneSends] += t.lanes
	for i, k := range [3]Counter{RecvTiny, RecvSmall, RecvMediumFrag} {
		c[k] += t.recv[i] + t.unexp[i]
		c[LaneRecvs] += t.recv[i]
	}
	c[AcksPiggybacked] += t.piggybacked
}
