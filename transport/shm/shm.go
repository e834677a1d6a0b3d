package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/owned"
	"github.com/gomx-dev/gomx/transport"
)

// NICBase is the NIC id of board 0: shm boards are NICBase | board, a
// locally administered unicast MAC prefix ("0e:67:6d", g-m).
const NICBase transport.NICID = 0x0E676D << 24

// MaxBoard is the largest board number.
const MaxBoard = 1<<24 - 1

// Options configure a shared-memory transport. Zero fields take defaults.
type Options struct {
	// Dir is the per-user endpoint directory. Default: $GOMX_SHM_DIR, else
	// /dev/shm/gomx-<uid>. It is created mode 0700 and refused if it
	// belongs to another user or is open to others.
	Dir string
	// Board is the board number (1..MaxBoard). 0 picks a free one. A board
	// left behind by a crashed process is taken over.
	Board int
	// NIC, when set, names the board after the NIC id of another transport
	// of this process (its UDP address or MAC) instead of a board number:
	// Addr returns NIC, and peers on this host that know only that NIC id
	// reach the board through shared memory (see Reaches). Board must be 0.
	NIC transport.NICID
	// MTU is the largest frame. Default 65535.
	MTU int
	// RingSize is the data bytes of each direction's ring, a multiple of 64
	// (records start on cache lines). Default 4 MiB minus the 4 KiB header
	// (two 2 MiB hugepages per ring).
	RingSize int
	// RingBudget bounds the lanes (per-pair rings) a transport writes,
	// together: a new lane gets RingSize, or RingBudget divided among
	// the lanes it may have (Lanes, or the other boards the endpoint
	// directory lists when they are fewer) when that is less: that share,
	// segment header included, rounded down to whole 4 KiB pages (a share
	// of more than a 2 MiB hugepage to whole hugepages, unless
	// NoHugepages), but never less than three frames of the MTU, a floor
	// that may end in part of a page (ringSize). Since a process also
	// maps the lanes its peers write to it, at most Lanes of them, it
	// maps at most about twice RingBudget in lanes. Default 8 MiB;
	// negative: every lane is RingSize.
	RingBudget int
	// QueueSize is the bytes of the transport's receive queue, which
	// every producer without a lane to it writes into and maps (see
	// queue.go): rounded up to a power of two that holds three frames of
	// the MTU. Default DefaultQueueSize (256 KiB).
	QueueSize int
	// LaneAfter is how many frames to a peer go through its receive
	// queue before the pair gets a lane of its own (if both ends have
	// one to spare: Lanes): that many within one LaneIdle, as RetireIdle
	// starts the count again every LaneIdle (without RetireIdle, that
	// many in all). Default 64; negative: at the first frame.
	LaneAfter int
	// Lanes bounds the lanes a transport writes, and the lanes it
	// accepts from its peers: the pairs past the bound keep the queue,
	// but for a pair busy on the queue, for which a transport at its
	// bound asks the producer of its lane used least recently to retire
	// it (askback.go). Default 8; negative: no lanes (every frame
	// through the queue).
	Lanes int
	// LaneIdle is how long a lane may go without a frame from its
	// producer before RetireIdle retires it, unmapping it on both sides
	// (the pair goes back to the queue, and gets a lane again once it is
	// busy again: lane.go). Default $GOMX_SHM_LANE_IDLE (a Go duration),
	// else DefaultLaneIdle; negative: lanes are never retired, nor
	// asked back.
	LaneIdle time.Duration
	// NoSpareLanes makes no lane segment before a pair asks for a lane
	// (spare.go): by default, a transport that dials a peer makes a
	// spare while the lanes it writes and its spares are fewer than Lanes
	// and than the peers it dialed, and a pair that asks takes one at
	// once. A negative LaneIdle makes none either (nothing would give an
	// untaken spare back before Close).
	NoSpareLanes bool
	// NoHugepages keeps rings on ordinary pages.
	NoHugepages bool
	// Spin is how long Recv polls the rings before sleeping on the
	// doorbell's eventfd. Default $GOMX_SHM_SPIN (a Go duration), else 20µs;
	// negative: never spin.
	Spin time.Duration
	// FullWait is how long a sender whose backlogs (frames that found
	// their receiver's queue or lane full) have reached their bound
	// waits for a receiver that takes nothing before it drops the frame
	// (counted; SendStrict fails with ErrRingFull). Below the bound a
	// frame waits in the backlog however long its receiver takes, and
	// the sender does not wait. Default 1s: a live receiver on a busy
	// machine can stall that long.
	FullWait time.Duration
}

// DefaultDir returns the endpoint directory Options.Dir defaults to.
func DefaultDir() string {
	if d := os.Getenv("GOMX_SHM_DIR"); d != "" {
		return d
	}
	return "/dev/shm/gomx-" + strconv.Itoa(os.Getuid())
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		o.Dir = DefaultDir()
	}
	if o.MTU == 0 {
		o.MTU = 65535
	}
	if o.RingSize == 0 {
		o.RingSize = 4<<20 - dataOff
	}
	if o.RingBudget == 0 {
		o.RingBudget = DefaultRingBudget
	}
	if o.LaneAfter == 0 {
		o.LaneAfter = defaultLaneAfter
	}
	if o.Lanes == 0 {
		o.Lanes = defaultLanes
	}
	if o.Lanes < 0 {
		o.Lanes = 0
	}
	if o.Spin == 0 {
		o.Spin = 20 * time.Microsecond
		if v := os.Getenv("GOMX_SHM_SPIN"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return o, fmt.Errorf("shm: GOMX_SHM_SPIN=%q is not a duration (write 20us, 0s or -1s): %w", v, err)
			}
			o.Spin = d
			if d == 0 {
				o.Spin = -1
			}
		}
	}
	if o.FullWait == 0 {
		o.FullWait = time.Second
	}
	if o.LaneIdle == 0 {
		o.LaneIdle = DefaultLaneIdle
		if v := os.Getenv("GOMX_SHM_LANE_IDLE"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d == 0 {
				return o, fmt.Errorf("shm: GOMX_SHM_LANE_IDLE=%q is not a duration other than 0 (write 100ms, or -1s to keep lanes for good)", v)
			}
			o.LaneIdle = d
		}
	}
	switch {
	case o.NIC != 0 && (o.Board != 0 || o.NIC&^transport.NICIDMask != 0):
		return o, fmt.Errorf("shm: a board named by NIC id %v takes no board number, and the id must fit 48 bits", o.NIC)
	case o.Board < 0 || o.Board > MaxBoard:
		return o, fmt.Errorf("shm: board %d outside 1..%d (0 picks one)", o.Board, MaxBoard)
	case o.MTU < 256 || o.MTU > 1<<20:
		return o, fmt.Errorf("shm: MTU %d outside 256..1MiB", o.MTU)
	case o.RingSize%ringAlign != 0 || o.RingSize < 4*recordLen(o.MTU) || o.RingSize < minRingLen:
		return o, fmt.Errorf("shm: ring size %d must be a multiple of 64 holding 4 frames of the MTU (%d) and at least %d", o.RingSize, o.MTU, minRingLen)
	case o.QueueSize < 0 || o.QueueSize > maxQueueSize:
		return o, fmt.Errorf("shm: queue size %d outside 0..%d (0 takes the default)", o.QueueSize, maxQueueSize)
	}
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	o.QueueSize = queueSizeFor(o.QueueSize, o.MTU)
	return o, nil
}

// Handshake messages, on the SOCK_SEQPACKET connection a producer opens to
// the consumer's socket: hello (producer → consumer) and welcome (consumer
// → producer, with the memfd of the doorbell and receive queue, and the
// eventfd). A lane comes later, over the same connection (lane.go).
const (
	helloMagic   = 0x676D7868 // "gmxh"
	welcomeMagic = 0x676D7877 // "gmxw"
	helloLen     = 24         // magic u32, version u32, nic u64, word u64; with the producer's room bell
	welcomeLen   = 20         // magic u32, version u32, mtu u32, producer id u32, queue size u32
	version      = 9          // 3: 64-byte records polled by their record word; 4: an eventfd doorbell; 5: hot and cold rings; 6: a receive queue, lanes on demand; 7: room bells, lanes asked without waiting; 8: lanes retired (a closing record); 9: lanes asked back by their consumer
	handshakeTTL = 5 * time.Second
)

// yieldAfter is how long a spinning Recv looks at the rings without a
// system call before it starts yielding the CPU between looks: a few round
// trips, so a frame on time costs no syscall, while a receiver whose
// producer waits for this CPU lets it run soon.
const yieldAfter = 20 * time.Microsecond

// Transport is a shared-memory transport: one board of this host. It
// implements transport.Transport and transport.Stats.
type Transport struct {
	path   string
	bell   segment // our doorbell, mapped by every producer sending to us
	bellFd int     // its memfd, passed to each producer; closed by Close
	// The Recv side's own state that every Peek and Take reads or
	// writes (under rmu, or the lock of a caller of Peek and Take), on
	// two whole cache lines (after 56 bytes of fields, as outRing's), so
	// a receiver whose lines other processes' turns evicted (an
	// oversubscribed collective) fetches two of them, not the five these
	// fields spread over before (TestHotLines). The hot
	// rings and the round robin over them; the record Peek returned,
	// for Take: its ring (nil and peekedQ: the queue's), its index in
	// the hot set (-1: a cold ring) and the record's length; toCommit:
	// poll consumed records or saw a dead ring since the last commit.
	hot       []hotRing
	rr        int
	peeked    *inRing
	peekedAt  int
	peekedLen uint64
	toCommit  bool
	peekedQ   bool
	// recvd counts the frames received. It has one writer at a time:
	// the Recv side, which is serialized (rmu in Recv, the caller's lock
	// around Peek and Take): a count without a locked instruction per
	// frame.
	recvd owned.Count
	// The producer of the queue record Peek returned and its length, for
	// Take's count (askback.go).
	peekedQR *inRing
	peekedQN int
	mtu      int          // opts.MTU, for parseRecord
	nLanes   atomic.Int32 // the lanes in groups
	fullScan atomic.Bool  // the Recv side looks at every ring once (a ring's producer went away)
	// The receive queue (queue.go, lane.go): the consumer's view (Recv
	// side), its cursor, the cursor's word and broken first, on the
	// second line too.
	q     qConsumer
	pend  uint64 // the summary bits not yet found empty (notify.go)
	rrBit int    // where the last look at them stopped

	opts Options
	nic  transport.NICID
	ln   *net.UnixListener
	// slp, blocked and slept are the doorbell's sleeping flag, blocked
	// waiters and sleep total; sleepFrom is when the sleep ArmSleep
	// prepared began, sleepHeld whether a waiter was blocked then.
	slp       *atomic.Uint32
	blocked   *atomic.Uint32
	slept     *atomic.Uint64
	sleepFrom time.Time
	sleepHeld bool
	// ev is the doorbell's eventfd, passed to each producer with the
	// memfd: a sleeping Recv waits on it (under rmu; see sleep). roomBell is
	// the flusher's: passed to each consumer with our hello, which
	// writes it when it frees room our backlogs wait for (lane.go).
	ev       *eventBell
	roomBell *eventBell

	inMu sync.Mutex
	in   atomic.Pointer[[]*inRing] // copy on write under inMu (setIn)
	// groups lists the rings of each summary bit (setIn); nextBit is the
	// bit of the next ring (under inMu). See notify.go.
	groups  atomic.Pointer[ringGroups]
	nextBit int
	// sum is the summary word in our doorbell.
	sum *atomic.Uint64

	outMu   sync.Mutex
	out     map[transport.NICID]*outRing
	lastOut atomic.Pointer[outRing]                      // the ring connected last: Send finds it without outMu
	outSnap atomic.Pointer[map[transport.NICID]*outRing] // a copy of out for Send (snapOut)
	// closed and serial (SerialSends: SendParts locks no ring) are read
	// by every send, beside the first slots of sendTo, which caches the
	// rings a serialized sender found (serialRingTo); only it, and Close,
	// which it is serialized with, touch it.
	closed atomic.Bool
	serial atomic.Bool
	sendTo [sendToLen]*outRing
	// closing is closed as Close begins: a ShareSegments waiting for a
	// peer's acknowledgements returns, rather than wait out the handshake
	// time behind a peer that does not answer.
	closing chan struct{}
	// shareTTL bounds ShareSegments' wait for acknowledgements:
	// handshakeTTL (tests shorten it between shares).
	shareTTL time.Duration

	lostMu sync.Mutex
	lost   map[transport.NICID]struct{} // peers gone since the last LostPeers
	// gonePid: the process last reported lost of each peer (noteLost).
	gonePid map[transport.NICID]int

	wakeReq atomic.Bool // Wake asked a blocked Recv to return

	spin atomic.Int64 // Recv's spin (ns, <= 0: none): Options.Spin, then SetSpin

	word atomic.Uint64 // see Publish

	pool      *Pool                        // pool.go; guarded by outMu
	unmapHook atomic.Pointer[func([]byte)] // see OnSegmentUnmap

	rmu   sync.Mutex                 // held by Recv; Close takes it to unmap safely
	lends *transport.Lends[struct{}] // holds: always copies (Hold)
	// The rest of the Recv side's own state (under rmu, or the lock of a
	// caller of Peek and Take; see hot above): looks at the hot set;
	// touched: the rings poll consumed records of since the last commit;
	// anyGone: a ring was found gone.
	looks   uint64
	touched []*inRing
	anyGone bool
	wg      sync.WaitGroup

	// The receive queue's producers' ids (under inMu), with those of
	// producers that went away kept until no claim of theirs can lie
	// ahead; the lanes written to us (under inMu) and by us (under
	// outMu).
	qProd    map[uint32]*inRing
	qDead    []*inRing
	qSeen    []*inRing // the Recv side's copy of qProd's entries it used, by id
	qNextID  uint32
	qHigh    atomic.Uint32 // the highest producer id given: takeWaiters' bound
	lanesIn  int
	lanesOut atomic.Int32
	// Spare lanes (spare.go): segments made ahead of an ask (under
	// spareMu).
	spareMu sync.Mutex
	spares  []spareLane
	// spareSize is the size of a lane made now (ringSize), as last
	// computed off the send path: when a spare was made, and at
	// RetireIdle's looks while there are spares. takeSpare compares
	// with it, as ringSize reads the socket directory (spare.go).
	spareSize atomic.Int64
	// dirList is the endpoint directory, held open for boardsListed
	// (footprint.go).
	dirList dirList
	// laneSeg makes a lane's segment (newSegment; a test's replacement
	// holds it back to show that senders do not wait for it).
	laneSeg func(name string, n int, huge bool) (segment, int, error)
	// spareFD is given up to refuse a connection at the descriptor limit,
	// and fdRefused notes the peers so refused (fdlimit.go).
	spareFD   fdSpare
	fdRefused fdRefusals
	// The backlogs (lane.go): the rings that have one (under blMu, as
	// is flushing: the flusher runs), and the bytes they hold.
	blMu     sync.Mutex
	blOuts   []*outRing
	pollList []*outRing // pollBacklogs' copy of blOuts (Recv side)
	flushing bool
	blBytes  atomic.Int64
	// Retiring lanes (lane.go): RetireIdle's state (under idleMu): when
	// it last looked at the lanes and when the count of frames a pair
	// sends through the queue before it asks for a lane last started
	// again (epoch, which each pair compares with its own); laneWanted:
	// a pair asked for a lane while we wrote Lanes of them. anyRetired:
	// the Recv side read a lane's closing record (freeRetired unmaps it).
	idleMu     sync.Mutex
	lastSweep  time.Time
	epochAt    time.Time
	epoch      atomic.Uint32
	laneWanted atomic.Bool
	anyRetired bool
	// Lanes asked back (askback.go): tick counts RetireIdle's looks (the
	// Recv side's clock; inTick: the look it last acted on); asked: a
	// consumer asked us to retire a lane we write. askV, askAt and
	// grantTo: our ask out (Recv side); reserved and offerAt: the lane
	// kept for grantTo since that look (under inMu).
	tick     atomic.Uint32
	asked    atomic.Bool
	inTick   uint32
	askV     *inRing
	askAt    uint32
	grantTo  *inRing
	reserved *inRing
	offerAt  uint32

	cnt struct {
		sent, dropFull, corrupt, peersGone, refused, sleeps, wakes, yields atomic.Uint64
		// lane.go: lanes opened, lanes a peer refused, claims of dead
		// producers skipped, queue broken by a producer.
		lanes, lanesRefused, qSkipped, qBroken atomic.Uint64
		// spare.go: spare lanes made, and taken by a pair that asked
		spares, sparesTaken atomic.Uint64
		// lanes we retired as their producer, lanes our producers
		// retired (read to their closing record and unmapped)
		lanesRetired, lanesClosedIn atomic.Uint64
		// askback.go: lanes we asked producers to retire for a busier
		// pair, lanes kept for such a pair that it took, asks and
		// kept lanes that lapsed, lanes we retired at our consumer's ask
		askedBack, granted, askLapsed, retiredAsked atomic.Uint64
		// frames that went into a backlog, and room bells written for
		// backlogs (by us as a consumer) (lane.go)
		backlogged, roomWakes atomic.Uint64
		stale                 atomic.Uint64 // stale sockets Open removed (stale.go)
		inPlace, refBad       atomic.Uint64 // inplace.go
		promotions            atomic.Uint64 // cold rings made hot (notify.go)
	}

	refs refRegions // regions sent in place (inplace.go)
}

// inRing is a ring another process writes to us.
//
// What a look at the ring reads (Peek, pollHot) comes first, on one cache
// line of its 64-byte-aligned allocation (the padding at the end keeps
// its size a multiple of 64 bytes, and so its size class's objects
// aligned; TestHotLines checks both), and what a take writes on the next:
// a receiver whose lines other processes' turns evicted (an
// oversubscribed collective) fetches one line of the ring for an empty
// look, two for a record, not the three or four its fields spread over
// before.
type inRing struct {
	wordAt *atomic.Uint32 // the record word at cur
	// dead: the producer went away (its connection closed) or broke the
	// ring. gone: and the Recv goroutine, which alone reads and writes
	// it, read every record the producer published (or the ring is
	// broken): commit unmaps the ring.
	dead    atomic.Bool
	gone    bool
	data    []byte
	cur     uint64 // our head, published by commit
	pos     uint64 // cur % len(data), kept without a division
	peer    transport.NICID
	pubHead uint64 // the head as last published
	// pubEvery: commit publishes the head once it moved this far (an
	// eighth of the ring at most); refsIn: or a reference record was
	// consumed since.
	pubEvery uint64
	head     *atomic.Uint64
	refsIn   bool
	seg      segment
	// bit is the ring's summary bit, notify the word in its header that
	// tells the producer whether to set it; hot: the Recv side polls the
	// ring directly; coldHits: frames delivered while cold; touched: in
	// t.touched (notify.go; all but bit and notify belong to the Recv
	// side).
	bit      int
	notify   *atomic.Uint32
	hot      bool
	coldHits uint32
	touched  bool
	conn     *net.UnixConn
	pid      int    // the producer's process (SO_PEERCRED)
	word     uint64 // what it published (see Publish)
	segMu    sync.RWMutex
	segs     map[uint32]segment // the producer's pool segments (pool.go)
	// qid is the producer's id in our receive queue; gate, once the
	// producer has a lane (data != nil), the queue cursor past its last
	// record there: the lane is read only once the queue's cursor has
	// reached it (0: open; gatePending: not yet read from gateW, the
	// word in the lane's header), so the pair's frames stay in order
	// (lane.go). wait is the lane's word that its producer's backlog
	// waits for room. qTail: for a producer that went away, the queue's
	// tail then.
	qid   uint32
	gate  uint64
	gateW *atomic.Uint64
	wait  *atomic.Uint32
	qTail uint64
	// lane is set once a lane is mapped (mapLane), cleared once it is
	// unmapped after its closing record (freeRetired); closed: the Recv
	// side read that record (lane.go).
	lane   atomic.Bool
	closed bool
	// room is the producer's room bell (an eventfd it passed with its
	// hello): the Recv side writes it when it frees room the producer's
	// backlog waits for (lane.go), and closes it with the ring (-1 then).
	room int
	// What the Recv side measures of the pair's traffic (askback.go):
	// frames and bytes through the queue and their marks at the last
	// look; for a lane, its cursor at the last look (useCur, laneSeen:
	// noted since it was mapped) and the look that last found it moved;
	// the loads (decaying sums per look) of the pair's frames through the
	// queue and of its bytes both ways. A producer that let a lane kept
	// for it lapse is not offered one again before the look snubUntil.
	qFrames, qBytes, qfMark, qbMark, qfLoad uint64
	laneSeen                                bool
	useCur, load                            uint64
	usedAt, snubUntil                       uint32
	// Up to 384 bytes, a size class whose objects are 64-byte aligned
	// (TestHotLines says by how much when a field is added).
	_ [40]byte
}

// outRing is a ring we write to another process.
//
// What a send to a lane reads and writes (sendParts, putLine, publish)
// lies on two whole cache lines: a sender whose lines other processes'
// turns evicted (an oversubscribed collective) fetches two lines of it,
// not the six its fields spread over before. The ring's size class is a
// multiple of 64 bytes, and the runtime puts an 8-byte header before an
// object of more than 512 bytes with pointers: so 56 bytes of fields
// come first, and the hot ones start a line (TestHotLines).
type outRing struct {
	seg      segment
	head     *atomic.Uint64
	blocked  *atomic.Uint32 // the consumer's blocked waiters (PeerSleeps)
	slept    *atomic.Uint64 // the consumer's sleep total (PeerSleeps)
	producer                // the data area and our cursor (ring.go)
	headSeen uint64         // cached consumer head: reloaded only when the ring looks full
	peer     transport.NICID
	mtu      int
	dead     atomic.Bool
	// blOn says the backlog holds frames (stored under mu): a writer
	// of a lane after SerialSends, which takes no lock, takes mu then;
	// as it does when retireAsk says the consumer asked for the lane
	// back (set by the connection's watcher, askback.go).
	blOn      atomic.Bool
	retireAsk atomic.Bool
	shut      bool // closed (close)
	// sent counts the frames written: per ring, so senders to different
	// peers share no counter; its writers are serialized (o.mu, or the
	// caller of SerialSends), so it is counted without a locked
	// instruction.
	sent owned.Count
	notifyWords
	slp *atomic.Uint32
	mu  sync.Mutex

	bell  segment
	ev    int // the consumer's eventfd (see kick); closed by close
	conn  *net.UnixConn
	pid   int            // the consumer's process (SO_PEERCRED)
	wakes *atomic.Uint64 // the transport's count of wake-ups sent
	// shareWait: one ShareSegments at a time waits for the consumer's
	// acks; shareMu guards shared and sharedGen, never held across a
	// wait; answers holds the acks (pool.go).
	shareWait sync.Mutex
	shareMu   sync.Mutex
	shared    map[uint32]bool // pool segments passed to the consumer (pool.go)
	sharedGen uint64          // the pool's gen when it last had them all
	answers   shareAnswers
	laneAns   chan uint32   // the consumer's answer to a lane (lane.go)
	gone      chan struct{} // closed when the connection closes
	// q is the consumer's receive queue, which frames go through while
	// the pair has no lane (data == nil); viaQueue counts them, and
	// noLane says a lane was refused (or none is to be had).
	q        qProducer
	viaQueue int
	noLane   bool
	// laneAsked: a lane was passed to the consumer (askLane; its
	// segment in seg until taken); laneOK: its answer as laneReady read
	// it (0: none yet, 1: accepted, 2: refused). lanesCnt and refusedCnt
	// are the transport's counts of answers. wait is the lane's word
	// that a backlog waits for room in it (lane.go).
	laneAsked            bool
	making               bool // makeLane makes the lane (lane.go)
	laneOK               uint8
	lanesCnt, refusedCnt *atomic.Uint64
	wait                 *atomic.Uint32
	// backlog holds copies of the pair's frames, in order, that wait for
	// room in the consumer's queue (lane.go); blListed: in the
	// transport's blOuts (under its blMu). blBytes and dropped are the
	// transport's byte count of the backlogs and its count of frames
	// dropped. All but blListed under mu.
	backlog  [][]byte
	blListed bool
	// offered: the consumer keeps a lane for the pair, which asks for it
	// at once. asked is the transport's flag for RetireIdle.
	offered atomic.Bool
	asked   *atomic.Bool
	// askEpoch: the transport's epoch (epochOf) when the consumer's ask
	// came (askback.go).
	epochOf  *atomic.Uint32
	askEpoch atomic.Uint32
	blBytes  *atomic.Int64
	dropped  *atomic.Uint64
	// laneBytes is the lane's segment length once it is written (0: no
	// lane), for Footprint.
	laneBytes atomic.Int64
	// Retiring the lane (lane.go): retiring, from the closing record
	// until the consumer said it unmapped the lane (laneFreed, set by
	// the connection's watcher); epoch: the transport's epoch when
	// viaQueue last started again; refusedNoted: a refusal was counted
	// since the pair last had a lane (by askLane, or by the watcher for
	// the consumer's answer). idleSent and idleSince: the frames sent
	// when RetireIdle last saw the count change, and when (idleMark: they
	// are set for the lane in use; idleSince is also read under the
	// transport's idleMu). All but laneFreed and refusedNoted under mu.
	retiring     bool
	laneFreed    atomic.Bool
	epoch        uint32
	refusedNoted atomic.Bool
	idleMark     bool
	idleSent     uint64
	idleSince    time.Time
	refs         []refPending // reference records the consumer has not passed (inplace.go)
	// fdRefused is the transport's note of peers that cannot be reached
	// for lack of descriptors, where a ctlFDLimit goes (fdlimit.go).
	fdRefused *fdRefusals
}

// Open creates the board's doorbell and listens on its socket in the
// endpoint directory. On failure every step is undone.
func Open(opts Options) (*Transport, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkDir(o.Dir); err != nil {
		return nil, err
	}
	stale := sweepStale(o.Dir) // stale.go
	bell, bfd, err := newSegment("gomx-doorbell", queueSegLen(o.QueueSize), false)
	if err != nil {
		return nil, err
	}
	initQueue(bell.mem)
	ev, err := newEventBell("doorbell")
	if err != nil {
		bell.unmap()
		unix.Close(bfd)
		return nil, err
	}
	room, err := newEventBell("room bell")
	if err != nil {
		bell.unmap()
		unix.Close(bfd)
		ev.close()
		return nil, err
	}
	t := &Transport{opts: o, mtu: o.MTU, bell: bell, bellFd: bfd, ev: ev, roomBell: room, out: make(map[transport.NICID]*outRing), lends: transport.NewLends[struct{}](0),
		closing: make(chan struct{}), shareTTL: handshakeTTL}
	t.cnt.stale.Store(uint64(stale))
	t.spin.Store(int64(o.Spin))
	t.q, t.qProd, t.qNextID = newQConsumer(bell.mem), make(map[uint32]*inRing), 1
	if o.Lanes == 0 {
		t.q.lanesFull.Store(1) // it takes none
	}
	t.slp = u32At(bell.mem, bellSleepOff)
	t.blocked = u32At(bell.mem, bellBlockOff)
	t.slept = u64At(bell.mem, bellSleptOff)
	t.sum = u64At(bell.mem, bellSumOff)
	t.setIn(nil)
	err = t.spareFD.take() // fdlimit.go
	if err != nil {
		err = fmt.Errorf("shm: open a spare descriptor: %w", err)
	} else if err = t.listen(); err != nil {
		t.spareFD.give()
	}
	if err != nil {
		bell.unmap()
		unix.Close(bfd)
		ev.close()
		room.close()
		return nil, err
	}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

func (t *Transport) sockPath(board int) string {
	return filepath.Join(t.opts.Dir, fmt.Sprintf("%06x.sock", board))
}

// peerPath is the socket of the board with NIC id peer: a numbered board,
// or one named after another transport's NIC id.
func (t *Transport) peerPath(peer transport.NICID) string {
	if peer&^MaxBoard == NICBase {
		return t.sockPath(int(peer &^ NICBase))
	}
	return filepath.Join(t.opts.Dir, fmt.Sprintf("n%012x.sock", uint64(peer)))
}

// listen binds the board's socket: the requested board (taking over a stale
// socket a crashed process left), or the first free one.
func (t *Transport) listen() error {
	if t.opts.NIC != 0 {
		return t.bindPath(t.peerPath(t.opts.NIC), t.opts.NIC, true)
	}
	if t.opts.Board != 0 {
		return t.bind(t.opts.Board, true)
	}
	start := (os.Getpid()*64 + int(seqBoards.Add(1))) % MaxBoard
	for i := 0; i < 4096; i++ {
		b := (start+i)%MaxBoard + 1
		if err := t.bind(b, false); err == nil {
			return nil
		} else if !errors.Is(err, unix.EADDRINUSE) {
			return err
		}
	}
	return fmt.Errorf("shm: no free board number in %s", t.opts.Dir)
}

var seqBoards atomic.Uint32

func (t *Transport) bind(board int, takeOver bool) error {
	return t.bindPath(t.sockPath(board), NICBase|transport.NICID(board), takeOver)
}

func (t *Transport) bindPath(path string, nic transport.NICID, takeOver bool) error {
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil && takeOver && errors.Is(err, unix.EADDRINUSE) {
		// A live board answers; a crashed one left its socket behind.
		c, derr := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if derr == nil {
			c.Close()
			return fmt.Errorf("shm: board %v is in use by a live process (%s)", nic, path)
		}
		os.Remove(path)
		ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	}
	if err != nil {
		return fmt.Errorf("shm: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("shm: chmod %s: %w", path, err)
	}
	t.ln, t.path, t.nic = ln, path, nic
	return nil
}

// Addr returns the board's NIC id (NICBase | board).
func (t *Transport) Addr() transport.NICID { return t.nic }

// MTU returns the largest frame.
func (t *Transport) MTU() int { return t.opts.MTU }

// FullWait returns how long a Send that found the backlogs at their bound
// waits for a consumer that takes nothing before it drops a frame
// (Options.FullWait): the rings lose no frame sooner, so a layer above
// that resends lost frames need not look for losses earlier.
func (t *Transport) FullWait() time.Duration { return t.opts.FullWait }

// Board returns the board number.
func (t *Transport) Board() int { return int(t.nic &^ NICBase) }

// Path returns the board's socket in the endpoint directory.
func (t *Transport) Path() string { return t.path }

// accept runs the consumer side of handshakes.
func (t *Transport) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.AcceptUnix()
		if err != nil {
			if t.closed.Load() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if isFDLimit(err) && t.refuseAtLimit() { // fdlimit.go
				continue
			}
			time.Sleep(time.Millisecond) // EMFILE without a spare, and the like: back off
			continue
		}
		if err := t.welcome(c); err != nil {
			t.cnt.refused.Add(1)
			c.Close()
		}
		t.spareFD.retake() // fdlimit.go
	}
}

// welcome checks a producer (same user), gives it an id in the receive
// queue, answers with the doorbell and queue and starts watching the
// connection: when it closes, the producer is gone. Its lane, if it asks
// for one later, comes over the same connection (inLane, lane.go).
func (t *Transport) welcome(c *net.UnixConn) error {
	uid, pid, err := peerCred(c)
	if err != nil {
		return err
	}
	if uid != os.Getuid() {
		return fmt.Errorf("shm: refused a connection from uid %d", uid)
	}
	c.SetDeadline(time.Now().Add(handshakeTTL))
	msg, fds, err := recvFD(c, helloLen, 1)
	if errors.Is(err, ErrFDLimit) {
		t.refuse(c, msg) // the hello's room bell did not fit: fdlimit.go
		return err
	}
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	peer := transport.NICID(le.Uint64(msg[8:]))
	if le.Uint32(msg) != helloMagic || le.Uint32(msg[4:]) != version || peer&^transport.NICIDMask != 0 {
		closeAll(fds)
		return errors.New("shm: bad hello")
	}
	if err := checkBellEvent(fds[0]); err != nil {
		return err
	}
	r := &inRing{peer: peer, conn: c, pid: pid, word: le.Uint64(msg[16:]), room: fds[0]}
	t.connected(peer, pid) // before the producer can send a frame
	t.inMu.Lock()
	if t.closed.Load() {
		t.inMu.Unlock()
		unix.Close(r.room)
		return net.ErrClosed
	}
	if !t.newProducerID(r) {
		t.inMu.Unlock()
		unix.Close(r.room)
		return fmt.Errorf("shm: no free producer id in the receive queue (it takes at most %d producers, MaxProducers)", MaxProducers)
	}
	old := *t.in.Load()
	t.setIn(append(append(make([]*inRing, 0, len(old)+1), old...), r))
	t.inMu.Unlock()
	// Both descriptors stay open until Close, which closes them after this
	// goroutine (accept) has returned.
	w := make([]byte, welcomeLen)
	le.PutUint32(w, welcomeMagic)
	le.PutUint32(w[4:], version)
	le.PutUint32(w[8:], uint32(t.opts.MTU))
	le.PutUint32(w[12:], r.qid)
	le.PutUint32(w[16:], uint32(t.opts.QueueSize))
	if err := sendFD(c, w, t.bellFd, t.ev.fd); err != nil {
		// Recv drops it (and closes c) at its next call.
		r.dead.Store(true)
		t.fullScan.Store(true)
		t.ring()
		return nil
	}
	c.SetDeadline(time.Time{})
	t.wg.Add(1)
	go t.watch(c, &r.dead, peer, pid, func(msg []byte, fds []int) {
		if msg == nil {
			// The producer is gone: its segments are unmapped with
			// its ring, once the Recv goroutine read what it published
			// (commitDead), since its last records may name them.
			return
		}
		t.inControl(r, c, msg, fds)
	})
	return nil
}

// watch waits for the peer's end of c to close (the peer exited, crashed or
// closed its transport), marks its ring dead, reports the loss of process
// pid (noteLost) and rings our doorbell so a sleeping Recv drops it.
// Control messages on the connection (pool segments, pool.go) go to
// handle, with the descriptors they carry.
func (t *Transport) watch(c *net.UnixConn, dead *atomic.Bool, peer transport.NICID, pid int, handle func(msg []byte, fds []int)) {
	defer t.wg.Done()
	var b [ctlLen + 1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(b[:], oob)
		if err != nil || (n == 0 && oobn == 0) {
			break
		}
		handle(b[:n], parseRights(oob[:oobn]))
	}
	handle(nil, nil)
	// The loss is reported before the ring is marked dead: a sender that
	// finds it dead connects to the process that takes the board over
	// next, and the layer above takes the losses reported before that
	// process answered it for losses of earlier ones.
	if !dead.Load() && !t.closed.Load() {
		t.noteLost(peer, pid)
	}
	if !dead.Swap(true) && !t.closed.Load() {
		t.cnt.peersGone.Add(1)
	}
	// A cold ring is looked at only when its bit comes up: the Recv side
	// looks at every ring once, and finds this one dead (notify.go).
	t.fullScan.Store(true)
	t.ring()
	// A backlog to the peer is dropped by the flusher, which may sleep.
	t.roomBell.ring()
}

// Lost peers are reported per process, not per connection. A peer process
// has two connections with us, its ring to us and ours to it, each watched
// by a goroutine of its own; when it goes, both close, but the second
// watcher may run well after the first (on a loaded machine, after the
// layer above has seen the loss, a new process has taken the board over
// and been connected to). A second report then would be taken for the loss
// of the new process, whose partners would be reset right after their
// connect. So noteLost reports a peer only when the process that went is
// not the one last reported for it. A new connection with that same
// process id (a board closed and opened again in one process, or peers
// whose ids this process cannot see, all 0) makes the next loss news
// again (connected).

// noteLost reports that peer's process pid went away, unless that loss was
// reported already (see above).
func (t *Transport) noteLost(peer transport.NICID, pid int) {
	t.lostMu.Lock()
	defer t.lostMu.Unlock()
	if p, ok := t.gonePid[peer]; ok && p == pid {
		return
	}
	if t.lost == nil {
		t.lost = make(map[transport.NICID]struct{})
		t.gonePid = make(map[transport.NICID]int)
	}
	t.lost[peer] = struct{}{}
	t.gonePid[peer] = pid
}

// connected notes a new connection with peer's process pid, before the
// first frame can cross it: if that process was reported lost, its next
// loss is news (see above). (Noted later, it could come after that very
// process's loss was reported, and make the close of its other connection
// news again.)
func (t *Transport) connected(peer transport.NICID, pid int) {
	t.lostMu.Lock()
	if p, ok := t.gonePid[peer]; ok && p == pid {
		delete(t.gonePid, peer)
	}
	t.lostMu.Unlock()
}

// Publish sets a word every board this transport connects to from now on
// receives with the connection (see PeerProcess); mx publishes where its
// table of large-send buffers lives. It takes effect on connections made
// after it, so a user calls it before the first Send.
func (t *Transport) Publish(word uint64) { t.word.Store(word) }

// PeerProcess reports the process id of the board peer, as the kernel gave
// it (SO_PEERCRED, in this process's pid namespace), and the word it
// published, if peer has a live ring to this transport (it sent to us).
// Both are those of a process of this user.
func (t *Transport) PeerProcess(peer transport.NICID) (pid int, word uint64, ok bool) {
	for _, r := range *t.in.Load() {
		if r.peer == peer && !r.dead.Load() {
			return r.pid, r.word, true
		}
	}
	return 0, 0, false
}

// PeerPids appends the process ids of the boards with a live ring to this
// transport (those that sent to it), as PeerProcess reports them: a
// process with several boards that sent to us is there once per board.
// It takes no lock: the list of rings is read as published.
func (t *Transport) PeerPids(dst []int) []int {
	for _, r := range *t.in.Load() {
		if !r.dead.Load() {
			dst = append(dst, r.pid)
		}
	}
	return dst
}

// PeerSleep is what the doorbell of a board this transport sends to shows
// of that board's receiver (PeerSleeps).
type PeerSleep struct {
	Peer transport.NICID
	// Pid is the board's process, as PeerProcess reports it.
	Pid int
	// Sleeping says the receiver announced a sleep on its doorbell's
	// eventfd and has not ended it; Asleep, that it does so while a
	// waiter of its process is blocked in a wait on it (AddBlocked): a
	// receive loop asleep while its application computes is Sleeping,
	// not Asleep.
	Sleeping, Asleep bool
	// Slept is the time the receiver has slept in all with a waiter
	// blocked at the start and the end of the sleep, by its own clock,
	// added as each sleep ends (at least a nanosecond a sleep, for any
	// sleep, even one called off): a receiver seen Asleep at two looks
	// with Slept unchanged slept from the first to the second.
	Slept time.Duration
	// Since is when the sleep going on began, by the host's
	// CLOCK_MONOTONIC (MonoNow), when Asleep: that sleep is in no Slept
	// yet. Zero when not Asleep, for a sleep that began with no waiter
	// blocked (one Slept will not count: a loop asleep while its
	// application computes), or from a receiver that does not write it.
	Since time.Duration
}

// PeerSleeps appends the sleep state of the boards this transport sends
// to (see PeerSleep): loads of a line each receiver writes only when it
// goes to sleep or wakes and its waiters block or unblock. A ring a
// sender holds locked at that moment is left out (its doorbell is
// unmapped under that lock); so are rings whose connection has closed.
func (t *Transport) PeerSleeps(dst []PeerSleep) []PeerSleep {
	m := t.outSnap.Load()
	if m == nil {
		return dst
	}
	for _, o := range *m {
		if o.dead.Load() || !o.mu.TryLock() {
			continue
		}
		if !o.shut {
			// The total before and after the flag: a receiver that woke
			// (flag down, then the total) and slept again between the
			// loads is not taken for one that slept throughout.
			// The start of the sleep is written before the flag goes
			// up, so one read after the flag is this sleep's when the
			// totals around them agree.
			a := o.slept.Load()
			sleeping := o.slp.Load() != 0
			since := u64At(o.bell.mem, bellSinceOff).Load()
			blocked := o.blocked.Load() != 0
			b := o.slept.Load()
			ps := PeerSleep{Peer: o.peer, Pid: o.pid, Sleeping: sleeping,
				Asleep: sleeping && blocked && a == b, Slept: time.Duration(b)}
			if ps.Asleep && since != 0 {
				ps.Since = time.Duration(since)
			}
			dst = append(dst, ps)
		}
		o.mu.Unlock()
	}
	return dst
}

// AddBlocked adds n (1 as a waiter of the layer above blocks in a wait on
// this transport, -1 as it stops) to the count in the doorbell that
// PeerSleeps reads: producers take a receiver asleep for one whose
// process waits, not one whose receive loop sleeps while it computes.
func (t *Transport) AddBlocked(n int32) {
	t.blocked.Add(uint32(n))
}

// LostPeers appends the boards whose process went away (or that closed)
// since the last call, each process once (see noteLost): see
// transport.PeerWatcher.
func (t *Transport) LostPeers(dst []transport.NICID) []transport.NICID {
	t.lostMu.Lock()
	for p := range t.lost {
		dst = append(dst, p)
		delete(t.lost, p)
	}
	t.lostMu.Unlock()
	return dst
}

// Wake makes a Recv that is waiting (or the next one) return 0, nil at
// once: a receive loop uses it to stop without closing the transport, and
// mx to take Recv over from its progress goroutine. It makes a system call
// only when the Recv sleeps and no earlier request is still pending; a
// spinning one sees the request at its next look.
func (t *Transport) Wake() {
	// Sequentially consistent with Recv's store of sleeping and its
	// re-check of wakeReq (Dekker): either Recv sees the request, or we
	// see sleeping == 1 and write the eventfd it reads. A request still
	// pending was made by an earlier Wake, which gave the same promise
	// (Recv clears it as it returns for it): a woken Recv that has not
	// run yet still shows sleeping, and a caller that wakes it again and
	// again (mx's Request.Test while the loop waits for a CPU: with one P,
	// a million eventfd writes in one run) writes once.
	if t.wakeReq.Swap(true) {
		return
	}
	if t.slp.Load() != 0 {
		t.cnt.wakes.Add(1)
		t.ring()
	}
}

// ring wakes our own Recv: the eventfd's count stays up until a Recv
// reads it, so one that is about to sleep returns at once. After Close the
// file is closed and the write fails, harmlessly.
func (t *Transport) ring() { t.ev.ring() }
