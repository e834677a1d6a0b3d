package mx

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/internal/owned"
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// MaxEndpoints is the number of endpoint ids a board offers (the wire's
// 1-byte endpoint field).
const MaxEndpoints = 256

// AnyEndpoint asks OpenEndpoint for the first free endpoint id.
const AnyEndpoint = -1

// MaxSegments is the largest number of segments in one request.
const MaxSegments = 256

// minMTU is the smallest transport MTU a board accepts: a full SMALL frame.
const minMTU = 256

// rxBatch is how many frames one Recv may return.
const rxBatch = 64

// In busy-poll mode the progress goroutine stays away from Recv for
// pollGrace after the last waiter stopped polling, and then blocks in Recv
// for at most pollHandover at a time (unless the transport can be asked to
// return at once), so a new waiter gets Recv quickly.
const (
	pollGrace    = 2 * time.Millisecond
	pollHandover = 100 * time.Microsecond
)

// Board is one network attachment (a transport) with its endpoints. It owns
// the transport and runs the progress goroutine that receives frames, answers
// acks and pulls, resends on timers and completes requests, so progress
// never depends on the application calling in.
type Board struct {
	tr transport.Transport
	// rings is tr when it is shared-memory rings, else nil: asked on
	// every message (shmTo, partner.rings), and tr never changes.
	rings *shm.Transport
	// kicker is tr when its sends can be queued under mu and kicked
	// after it (peers.go, "Sends kick after the lock"); kickOwed (under
	// mu) says frames were queued since the last kick.
	kicker   transport.Kicker
	kickOwed bool
	opts     BoardOptions
	nic      transport.NICID
	mtu      int
	crc      bool // this board wants the CRC-32C trailer (announced at connect)
	ord      wire.Order
	tick     time.Duration
	// tickBusy is the timer period while a retransmission timer may be
	// pending (an unacked send or a pull) or was within busyLinger: a
	// quarter of RTOMin. (A send made while the progress goroutine waits
	// cannot shorten that wait, hence the linger.) An idle board wakes
	// every tick only.
	tickBusy time.Duration
	lastBusy int64
	// An idle board's ticks stretch (progress.go): idleTick is their
	// period (0 while the board ticks every tick or tickBusy), quietRuns
	// counts the ticks in a row that found nothing to time, fineTicks
	// says the fine timer keeps the ticks until the progress goroutine
	// has looked again (looks moved past fineMark), and tickRuns counts
	// the periodic timer runs. All under mu but looks, which the
	// progress goroutine adds to after each of its waits.
	idleTick  time.Duration
	quietRuns int
	fineTicks bool
	fineMark  uint64
	tickRuns  uint64
	looks     atomic.Uint64
	base      time.Time

	// mu protects every field below and all endpoint, partner and request
	// state of the board.
	mu     sync.Mutex
	closed bool
	// The fields an 8-byte message touches on the lane path, together
	// (TestHotLines): spread over the struct they cost a cache line each.
	freeReqs []*Request
	late     *Request // freed, to be recycled at the next getReq (freeLater)
	nowv     int64    // the board's clock as last read (now, setNow)
	nowOK    bool     // nowv was read since the batch in hand began
	// seen is the clock as the polling waiter whose batch is in hand last
	// read it, before the look that took the batch (lookLocked); 0: none
	// (see ackClock).
	seen int64
	// rxWaiter is the request of the polling waiter whose look took the
	// batch in hand (lookLocked), nil for none. recvShort hands that
	// request to its waiter as it delivers the message to it (rxTook),
	// without completing it, and lookLocked consumes it, as takeLane
	// does for a lane record.
	rxWaiter, rxTook *Request
	// readWants: the next reading has work waiting for it (useReading):
	// round-trip samples in rttPend, or ack deadlines in toStamp.
	readWants bool
	// rxRings: the batch being handled came from shared-memory rings,
	// whose frames carry no trailer (see sendFrame).
	rxRings bool
	// laneRec: the frame in hand is a lane record rebuilt as the frame
	// it stands for (recvLane), whose ack is a lane record's (ackLane);
	// recvSequenced takes it for that frame alone.
	laneRec  bool
	draining bool
	// shortOff sends and receives every message on the general paths,
	// never on the short path (short.go): for the tests that compare the two.
	shortOff bool
	selfq    [][]byte
	lout     []localDone // other boards' local sends to complete (local.go)
	cmaq     []*cmaCopy  // single copies to run when mu is released (cma.go)
	// ackOwed: partners on the rings that reached NotAckedMax unacked
	// messages, acked once a receive finds its source drained
	// (ack.go); each at most once (partner.owed).
	ackOwed []*partner
	// toStamp: partners whose ack deadline waits for the next clock
	// reading (stampAcks).
	toStamp []*partner
	// ackHeld: the partner whose message a polling waiter took last and
	// whose ack waits for the reply that carries it (holdAck), nil for
	// none.
	ackHeld *partner
	laneHdr [wire.LaneLen]byte // a lane record's header (lane.go)
	// pcopies: pull replies the copy engine is copying out of held
	// frames (pulloffload.go), oldest first.
	pcopies []*pullCopy
	host    *hostPath // peers of this host through shared memory (host.go)
	// reachGen moves at every change of where frames to a peer go
	// (host.go: the host path opened, a peer found on it or off it); a
	// partner's rings answer holds while it stays (partner.rings).
	reachGen uint64
	// ringEvery is ringAcks, worked out once from the options.
	ringEvery int
	eps       [MaxEndpoints]*Endpoint
	// epl lists the open endpoints of eps, in the order they opened: the
	// timers walk it, where a walk of eps copied and scanned all
	// MaxEndpoints slots at every timer run.
	epl     []*Endpoint
	wasOpen [MaxEndpoints]bool
	peers   []peerInfo
	peerIdx map[transport.NICID]uint16
	cnt     Counters
	// rxRead is the clock as the receive loop read it when its Recv
	// returned frames, for the batch's handling and the timer run after
	// it (progress); 0: none, the batch reads when a frame needs it.
	rxRead int64
	// rttPend are the round-trip samples acks in such a batch left for
	// the board's next clock reading, and rttSeen the waiter's reading
	// before them (sampleRTT).
	rttPend []rttPending
	rttSeen int64
	// unstamped: a message handled without a clock reading left its ack
	// deadline to the next one (noteReceived, stampAcks); read without mu
	// by polling waiters, which then read the clock soon (runDue).
	unstamped atomic.Bool
	nextTick  atomic.Int64 // written under mu; read without it by the receive loop
	due       atomic.Int64 // earliest noted retransmission deadline, 0: none (finetimer.go); written under mu, read without it by pollers
	armed     int64        // when the fine timer's timerfd fires, 0: not set
	// fineAwake: the fine timer's goroutine has fired and sets the
	// timerfd itself before it sleeps again, so armFine leaves it alone
	// (finetimer.go, "Setting the timerfd off the recovery's path"; b.mu).
	fineAwake bool
	// sends counts the board's sends (Board.send; b.mu): the fine timer's
	// goroutine yields after a run that sent frames.
	sends uint64
	// fineLapsed: a deadline was noted without setting the timerfd while
	// busy-polling waiters watched the board (finetimer.go); read without
	// mu by the receive loop.
	fineLapsed atomic.Bool
	txbuf      []byte
	frameMax   int // the largest frame Data on any path: the MTU, or the host path's (host.go)
	tx1        [1]transport.Frame
	txFrames   []transport.Frame
	txBufs     [][]byte
	lens       []int
	freeBufs   [][]byte
	pool       pools
	hostWait   map[transport.NICID][]chan struct{} // QueryHostname waiters
	rawq       []rawFrame
	lost       []transport.NICID // lost peers not yet acted on (peerloss.go)
	lostGen    uint64            // bumped whenever lost is acted on and emptied
	live       liveClock         // the board's own stalls, not a peer's silence (liveness.go)
	// Verdicts wait for a drain of the sources (verdict.go): a duty
	// wanted one (vWanted), the timer run drained them (vDrained), and
	// the source whose Recv the goroutine running the timers owns.
	// drainGen counts the drains started; vFrom is the oldest of them
	// that the completed drain's evidence dates from (a busy source's
	// mark may be older than the drain that counted it).
	vWanted, vDrained bool
	rxOwned           *rxSource
	vMarks            map[*rxSource]vMark // busy sources, when a verdict came due
	drainGen, vFrom   uint64
	hostErr           error
	closeOnce         sync.Once
	// fdLimited: the peers a connection to failed for lack of
	// descriptors since the last timer pass (fdlimit.go; under mu).
	fdLimited map[transport.NICID]error

	// holdUntil: no retransmission before this (board clock), the grace
	// a late timer run gives the peer (finetimer.go).
	holdUntil int64
	// uncapped: the timers run for no waiter spinning on a reply (under
	// mu): the fine timer's or the progress goroutine's run while no
	// waiter polls the board's source, or a polling waiter's for a send.
	// A busy-polling board's questions then wait the round-trip
	// estimate, not the envelope's cap (askWait, capsAsks).
	uncapped bool

	// cmaEps holds each endpoint's table of large-send buffers for
	// processes that copy from them; its address is published (cma.go).
	// (The word after them is the staging capability: stage.go.)
	cmaEps     [MaxEndpoints + 1]uint64
	cmaTabs    [MaxEndpoints][]uint64 // the tables, kept while the board lives
	cmaRefused bool                   // the kernel refused process_vm_readv (cma.go)
	copies     sync.WaitGroup         // copies queued or running without mu (cma.go, offload.go), staged sends whose copiers are still at work (stage.go)
	cmaQueued  atomic.Int32           // len(cmaq), read without mu
	cmaFree    []*cmaCopy             // recycled copies
	cmaTabAt   map[cmaKey]*cmaSender  // senders' endpoint tables and last entries (cma.go)
	shared     *sharedPool            // the shared pool, made on first use (shmpool.go)
	poolMu     sync.Mutex             // held by whoever makes the shared pool, before mu (shmpool.go)
	stage      stageState             // staged large messages (stage.go)
	// omx is the Data MTU of Open-MX peers (BoardOptions.OpenMXMTU less
	// the Ethernet header). (Here, not among the settings before mu,
	// so that mu keeps its place in its cache line: TestHotLines.)
	omx int
	zc  *zeroCopy  // zero-copy sends (zerocopy.go); nil when off
	plc *placeRecv // receiving in place (placerecv.go); nil when the transport cannot

	// src is the transport as a receive source: its owner is the
	// progress goroutine or a polling waiter (poll.go). allSrcs and
	// spinSrcs list what busy-polling and adaptive waiters poll: src and
	// the host path's rings.
	src        *rxSource
	allSrcs    []*rxSource
	spinSrcs   []*rxSource
	waitPolled atomic.Uint64

	// waitPolledLocked counts, under mu, the polled waits whose request
	// the waiter's own look consumed (takeLane): one more wait, counted
	// under the lock it holds anyway as an owned count (a plain load and
	// store), where waitPolled's Add after it would cost a locked
	// instruction between the message and the application (WaitStats
	// adds the two).
	waitPolledLocked owned.Count

	waitSlept  atomic.Uint64
	waitYields atomic.Uint64 // sched_yield calls of polling waiters
	// waitReadings: clock readings of polling waiters' loops (pollWait),
	// added as each wait's polling ends; for tests.
	waitReadings atomic.Uint64
	waitEngine   atomic.Uint64 // waits that slept because engine copies ran (poll.go)
	spinGrew     atomic.Uint64 // poll windows grown (spinGovernor)
	spinShrank   atomic.Uint64 // and shrunk
	loopRecvs    atomic.Uint64 // Recv calls of the progress goroutine
	loopOut      atomic.Uint64 // and returns from them
	// sleepsEmpty counts the board's sleeps that timed out with nothing
	// to do (counter SleepsEmpty): read without mu by Counters.
	sleepsEmpty atomic.Uint64
	loopWaits   atomic.Uint64 // Recv calls of the progress goroutine that may wait (timeout not 0)
	rawWake     chan struct{}
	quit        chan struct{}
	exited      chan struct{}
	// fine is the timerfd of the fine timer (nil without one);
	// fineExited is closed when its goroutine ends (finetimer.go).
	fine       *os.File
	fineFd     int
	fineExited chan struct{}
	// reaper finishes engine copies handed to the application's Tests
	// (enginereap.go); nil without an engine that can tell a copy's
	// completion without waiting.
	reaper *engineReaper

	// pcopyN mirrors len(pcopies) for the receive loop, which reads it
	// without mu. curFrame is the frame of the board's transport being
	// handled, for Hold.
	pcopyN   atomic.Int32
	curFrame *transport.Frame
	// rxLeft counts the frames received and not yet handled, in the
	// batches being handled (one nests in another when a verdict
	// drains a source): frames the NIC delivered before a span posted
	// now (placerecv.go).
	rxLeft int
	// rxLeftLane counts the same frames by the lane they came on
	// (transport.Frame.Lane; index 0 unused): a lane's queue holds only
	// what was posted on it, so only its own frames come before a span
	// posted there.
	rxLeftLane [transport.MaxLanes + 1]int
	// ackArms: partners whose ack deadline a frame of the batches being
	// handled started, noted for the fine timer once the outermost ends
	// (batchDepth deep; ack.go's armAck).
	ackArms    []*partner
	batchDepth int
	// ackEnds: partners a RNDV delivered unpulled in the batches being
	// handled left owing an ack, sent once the outermost ends (ack.go's
	// ackLarge, sendBatchAcks).
	ackEnds []*partner
	// anyHeld: some partner holds a lean frame it could not take yet
	// (lean.go), offered again after each timer run.
	anyHeld bool
	// timeCopies (set by benchmarks only) makes the receive path add the
	// time it spends on pull-reply copies to copyNanos.
	timeCopies bool
	copyNanos  int64
	// pinned: transport memory pinned with the engine (pulloffload.go).
	pinned map[*byte]func() error

	// woke counts, under mu, the goroutines a completion or an arrival
	// woke (complete, signalEvent): a receive loop whose batch moved it
	// hands its processor over before its next Recv (yieldToWoken).
	// Written under mu only, as an owned count; read without it.
	woke         owned.Count
	loopYields   atomic.Uint64 // receive loops' hand-overs to goroutines they woke
	waitHandOver atomic.Uint64 // waits that slept at once for a loop inside Recv (pollHandOver)
	// serveSends: a queue's board (set by NewQueuedBoard, before any
	// endpoint opens, while the progress goroutine runs), whose sends look
	// at its queue (rxsource.go's serveSource), unless handlers: an
	// endpoint of the board had an UnexpectedHandler, which its sends'
	// looks must not run.
	serveSends atomic.Bool
	handlers   atomic.Bool
	// progressTID is the OS thread of a progress goroutine locked to one
	// (ProgressThread), 0 before it starts or when it is not locked: a
	// benchmark reads that thread's CPU clock (ProgressCPU).
	progressTID atomic.Int32
	// waitServed counts the sends whose look took frames (serveSource).
	waitServed atomic.Uint64
	// sleep: the waiter that sleeps on the board's sources (sleep.go).
	sleep sleepState
	// cpus are the CPUs the progress goroutine's thread is bound to
	// (cpu.go), set before NewBoard returns; nil: not bound.
	cpus []int
	// pulling counts the endpoints' pulls in flight over the transport
	// (large.go), written under mu: a waiter asleep on the sources leaves
	// a pull's burst of replies to the receive loop (sleep.go).
	pulling atomic.Int32
	// oversub: whether waiters yield from their first look (oversub.go).
	oversub oversubState
}

// NewBoard opens a board on tr and starts its progress goroutine. The board
// owns tr from then on: Close closes it.
func NewBoard(tr transport.Transport, opts BoardOptions) (*Board, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	o.Local = o.Local.withEnv()
	if err := o.spinFromEnv(); err != nil { // spin.go
		return nil, err
	}
	if err := o.sleepEnv(); err != nil { // sleep.go
		return nil, err
	}
	if err := o.yieldEnv(); err != nil { // oversub.go
		return nil, err
	}
	if err := o.Local.largeEnv(); err != nil {
		return nil, err
	}
	if err := o.pullEngineEnv(); err != nil { // pulloffload.go
		return nil, err
	}
	mtu := tr.MTU()
	if mtu < minMTU {
		return nil, fmt.Errorf("%w: transport MTU %d below %d", ErrBadOptions, mtu, minMTU)
	}
	if mtu > 65535 {
		mtu = 65535
	}
	b := &Board{
		tr:       tr,
		opts:     o,
		nic:      tr.Addr(),
		mtu:      mtu,
		crc:      !o.NoChecksum,
		ord:      wire.BigEndian,
		base:     time.Now(),
		peerIdx:  make(map[transport.NICID]uint16),
		frameMax: mtu,
		rings:    shmOf(tr),
		src:      newRxSource(tr),
		rawWake:  make(chan struct{}, 1),
		quit:     make(chan struct{}),
		exited:   make(chan struct{}),

		fineExited: make(chan struct{}),
	}
	b.kicker, _ = tr.(transport.Kicker)
	b.reachGen = 1 // a new partner's rings (ringsGen 0) are looked up
	b.ringEvery = b.workRingAcks()
	if o.LittleEndian {
		b.ord = wire.LittleEndian
	}
	b.fine, b.fineFd = openFineTimer() // finetimer.go
	b.omx = min(o.OpenMXMTU-ethHeaderLen, mtu)
	// Frames to itself: a gomx peer with the same options.
	self := b.peerIndex(b.nic)
	b.peers[self].gomx, b.peers[self].crc, b.peers[self].maxFrame = true, b.crc, mtu
	b.peers[self].sack, b.peers[self].ask = !o.NoSack, true
	if max := wire.MaxMediumFrag * fragStride(mtu, b.crc); b.opts.RendezvousThreshold > max {
		b.opts.RendezvousThreshold = max
	}
	t := min(o.AckDelay, o.ResendDelay, o.PullTimeout) / 2
	b.tick = max(50*time.Microsecond, min(t, 10*time.Millisecond))
	b.tickBusy = max(50*time.Microsecond, min(b.tick, o.RTOMin/4))
	b.live.slack = stallSlackFor(b.tick) // liveness.go
	if o.noTicks {
		b.tick, b.tickBusy = time.Hour, time.Hour
	}
	if o.Names != nil && o.Hostname != "" {
		o.Names.Register(o.Hostname, b.nic)
	}
	register(b)
	b.allSrcs = []*rxSource{b.src}
	b.openHost() // host.go
	b.txbuf = make([]byte, b.frameMax+wire.ChecksumLen)
	for _, s := range b.allSrcs {
		if s.spin {
			b.spinSrcs = append(b.spinSrcs, s)
		}
	}
	b.zc = newZeroCopy(tr, o.ZeroCopy) // zerocopy.go
	b.plc = newPlaceRecv(tr, b.zc)     // placerecv.go
	b.openSleep()                      // sleep.go
	b.initOversub()                    // oversub.go
	b.cmaPublish()                     // cma.go
	if b.host != nil {
		go b.hostProgress() // host.go: after every field it may use is set
	}
	go b.fineTimer()                          // finetimer.go
	if err := b.startProgress(); err != nil { // cpu.go
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// NICID returns the board's NIC id.
func (b *Board) NICID() transport.NICID { return b.nic }

// MTU returns the transport's MTU.
func (b *Board) MTU() int { return b.mtu }

// Options returns the board's options with defaults filled in.
func (b *Board) Options() BoardOptions { return b.opts }

// RendezvousThreshold returns the largest message sent eagerly.
func (b *Board) RendezvousThreshold() int { return b.opts.RendezvousThreshold }

// Counters returns the board's counters: frames that reached no endpoint.
func (b *Board) Counters() Counters {
	b.mu.Lock()
	defer b.unlockKick()
	c := b.cnt
	c[SleepsEmpty] = b.sleepsEmpty.Load()
	return c
}

// Close closes every endpoint, stops the progress goroutine and closes the
// transport. Pending requests complete with ErrEndpointClosed.
func (b *Board) Close() error {
	var err error
	b.closeOnce.Do(func() {
		unregister(b)
		b.mu.Lock()
		b.closed = true
		for _, e := range b.eps {
			if e != nil {
				e.closeLocked()
			}
		}
		b.reapPullCopies(true) // none is left: every pull ended above
		b.unpinDMA()           // before the transport frees that memory
		out := b.takeLocalOut()
		b.takeCopy()  // the endpoints are closed: every queued copy completes, none is returned
		b.stageStop() // stage.go: every staged send was withdrawn above
		b.unlockKick()
		runLocalOut(out)
		b.copies.Wait() // those running complete their receives (cma.go)
		b.stopReaper()  // enginereap.go: its copies are among them
		close(b.quit)
		// Frames from Recv point into the transport's buffers (an
		// AF_XDP UMEM, say) until the next Recv or Close: wait for
		// whoever owns Recv to finish its batch before the transport
		// unmaps them. Recv waits until the board's next tick, which an
		// idle board stretches (progress.go): a transport that can be
		// woken is asked to return at once.
		if w := b.src.waker; w != nil {
			w.Wake()
		}
		b.src.mu.Lock()
		err = b.tr.Close()
		b.src.mu.Unlock()
		<-b.exited
		if b.fine != nil {
			b.fine.Close()
		}
		<-b.fineExited
		b.closeHost()
		b.stage.prep.Wait() // stage.go: the transports' Close ended their waits
		b.zcClose()         // zerocopy.go: after the transport completed its in-place sends
		b.src.mu.Lock()     // no waiter sleeps on the sources any more
		b.closeSleep()
		b.src.mu.Unlock()
		if b.opts.Names != nil && b.opts.Hostname != "" {
			b.opts.Names.Unregister(b.opts.Hostname)
		}
	})
	return err
}

// OpenEndpoint opens endpoint id (0..255, or AnyEndpoint for the first free
// one) with the given key: peers must present the same key to connect.
func (b *Board) OpenEndpoint(id int, key uint32) (*Endpoint, error) {
	b.mu.Lock()
	defer b.unlockKick()
	if b.closed {
		return nil, &OpError{Op: "open endpoint", Err: ErrBoardClosed}
	}
	if id == AnyEndpoint {
		id = -1
		for i, e := range b.eps {
			if e == nil {
				id = i
				break
			}
		}
		if id < 0 {
			return nil, &OpError{Op: "open endpoint", Err: ErrNoResources}
		}
	}
	if id < 0 || id >= MaxEndpoints {
		return nil, &OpError{Op: "open endpoint", Err: fmt.Errorf("%w: id %d", ErrBadEndpoint, id)}
	}
	if b.eps[id] != nil {
		return nil, &OpError{Op: "open endpoint", Endpoint: uint8(id), Err: ErrBusy}
	}
	e := newEndpoint(b, uint8(id), key)
	b.eps[id] = e
	b.epl = append(b.epl, e)
	b.wasOpen[id] = true
	registerLocal(e)
	b.cmaOpen(e)
	return e, nil
}

// ---- buffers and requests ----

func (b *Board) getBuf() []byte {
	if n := len(b.freeBufs); n > 0 {
		x := b.freeBufs[n-1]
		b.freeBufs = b.freeBufs[:n-1]
		return x[:0]
	}
	return make([]byte, 0, b.frameMax+wire.ChecksumLen)
}

func (b *Board) putBuf(x []byte) {
	if cap(x) == b.frameMax+wire.ChecksumLen && len(b.freeBufs) < 4096 {
		b.freeBufs = append(b.freeBufs, x)
	}
}

func (b *Board) getReq(e *Endpoint, kind reqKind) *Request {
	if b.late != nil && (b.kicker == nil || len(b.freeReqs) == 0) {
		// With a kicker, a short send's stampAfterKick recycles it,
		// after the frame left (short.go).
		b.recycle(b.late) // freeLater
		b.late = nil
	}
	var r *Request
	if n := len(b.freeReqs); n > 0 {
		r = b.freeReqs[n-1]
		b.freeReqs = b.freeReqs[:n-1]
	} else {
		r = &Request{ch: make(chan struct{}, 1)}
		r.region = -1 // as recycle leaves it
	}
	r.ep = e
	r.kind = kind
	return r
}

// maybeFree recycles r when neither the application nor the protocol holds it.
func (b *Board) maybeFree(r *Request) {
	if r.userHeld || r.protoHeld || r.kickHeld || r.kind == 0 {
		return
	}
	b.recycle(r)
}

// freeLater frees r, which neither the application nor the protocol holds
// any more, at the board's next getReq rather than now (b.mu held): r is
// marked free at once (no endpoint, no kind: a call on it fails with
// ErrBadRequest, and maybeFree leaves it alone), but the few hundred
// bytes of stores that clear it for the pool wait. A waiter that consumed
// its own receive (laneFast) answers it next: those stores, left in the
// store buffer, delayed the locked instructions of the unlocks and of the
// send that follow, between the message and its reply. The board's next
// request is the reply's, made after its record is in the ring.
func (b *Board) freeLater(r *Request) {
	r.ep, r.kind = nil, 0
	if b.late != nil {
		b.recycle(b.late)
	}
	b.late = r
}

// recycle clears r, which nobody holds, and keeps it for getReq.
func (b *Board) recycle(r *Request) {
	if r.signaled {
		// A waiter may have left without taking the signal: the next
		// use of r must not find it. (Most requests never had a
		// waiter, and need no look at the channel.)
		select {
		case <-r.ch:
		default:
		}
	}
	// The segments this use wrote: r.segs is segsBuf as the use's
	// append left it (IRecv, Message.IRecv, isend, isendLocal), and
	// every use's recycle clears what it wrote, so the rest of the
	// array holds no pointer. A send on the short or lean path wrote
	// none. (Not "for i := range segs { segs[i] = nil }", which the
	// compiler makes a call of memclrHasPointers: there are one or two.)
	for i, segs := 0, r.segs; i < len(segs); i++ {
		segs[i] = nil
	}
	// Only the use's state: the links are off every list (cleared by
	// their Remove), and the buffers and channel are kept. Cleared in
	// place: a composite literal would be built on the stack and copied
	// over it, twice the stores. The cold part only when this use may
	// have set it: a lean send's or a lane record's request touches
	// four lines of the six.
	if !r.narrow {
		r.buf = r.buf[:0]
		r.reqCold = reqCold{}
		r.region = -1
	}
	r.reqHot = reqHot{}
	if len(b.freeReqs) < 8192 {
		b.freeReqs = append(b.freeReqs, r)
	}
}

func randSession() uint32 {
	for {
		if s := rand.Uint32(); s != 0 {
			return s
		}
	}
}

// TransportCounters returns the transport's own counters when it keeps any
// (see transport.Stats), followed by those of the shared-memory host path
// when the board has one (their names start with "shm"); nil when there
// are none.
func (b *Board) TransportCounters() []transport.Counter {
	var out []transport.Counter
	if s, ok := b.tr.(transport.Stats); ok {
		out = s.Counters()
	}
	if b.host != nil {
		out = append(out, b.host.tr.Counters()...)
	}
	return out
}

// shmOf returns tr when it is shared-memory rings, else nil.
func shmOf(tr transport.Transport) *shm.Transport {
	s, _ := tr.(*shm.Transport)
	return s
}
