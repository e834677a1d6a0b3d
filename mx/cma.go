package mx

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// Single-copy large messages between processes of one host (CMA).
//
// When a large message's RNDV came from a board reached through shared
// memory (a shm board, or a peer on the host path), the receiver copies the
// message straight from the sender's buffer with process_vm_readv instead
// of pulling it through the rings: one copy, by the receiver, in one system
// call, with no PULL or PULL_REPLY frames. The wire protocol is unchanged:
// the receiver still ends with the NOTIFY that completes the send.
//
// To find the sender's buffer without a new frame, every board that talks
// shared memory keeps, in its own memory, a table of its endpoints' large
// send buffers: cmaEps holds, per endpoint id, the address of that
// endpoint's table, which has one entry per region (the region's sequence
// number and up to cmaMaxSegs address/length pairs). The board publishes
// the address of cmaEps to every shm board it connects to
// (shm.Transport.Publish), and the receiver learns it, with the sender's
// process id, from its ring (shm.Transport.PeerProcess). A pull then reads
// the endpoint's table address, the region's entry, and the data: three
// process_vm_readv calls, each checked (the entry must carry the RNDV's
// region sequence number and cover the message). The entry is written
// before the RNDV is sent and stays valid until the NOTIFY frees the region.
//
// The kernel allows process_vm_readv only where ptrace would be allowed
// (same user, and with Yama's ptrace_scope 1 only for a tracer the sender
// named, e.g. by PR_SET_PTRACER); where it refuses (EPERM), or the sender's
// buffer has more than cmaMaxSegs segments, the receiver pulls through the
// rings, counting the refusal. Go's heap does not move, so the addresses of
// a send's segments stay good while the send holds them.

// LargeStrategy chooses how large messages move between processes of one
// host.
type LargeStrategy int

const (
	// LargeAuto copies with process_vm_readv where the kernel permits it and
	// pulls through the rings otherwise (after the first refusal, the board
	// stops trying).
	LargeAuto LargeStrategy = iota
	// LargeRings always pulls through the shared-memory rings (two copies).
	LargeRings
	// LargeCMA always tries process_vm_readv first; a refusal still falls
	// back to the rings for that message (counted in CMARefused), so a
	// forced strategy never fails a message.
	LargeCMA
	// LargeShared copies a message whose send buffer lies in the sender's
	// shared pool (Endpoint.AllocShared) with the CPU, straight out of the
	// sender's segment mapped here (shmpool.go), never with the engine;
	// other buffers go as with LargeAuto.
	LargeShared
	// LargeEngine copies a message whose send buffer lies in the sender's
	// shared pool with LocalOptions.Engine at any size above the eager
	// threshold (offload.go); other buffers go as with LargeAuto. The
	// board refuses it without an engine.
	LargeEngine
)

// String names the strategy as GOMX_SHM_LARGE spells it.
func (s LargeStrategy) String() string {
	switch s {
	case LargeAuto:
		return "auto"
	case LargeRings:
		return "rings"
	case LargeCMA:
		return "cma"
	case LargeShared:
		return "shared"
	case LargeEngine:
		return "engine"
	}
	return fmt.Sprintf("LargeStrategy(%d)", int(s))
}

// ParseLargeStrategy parses auto, rings, cma, shared or engine.
func ParseLargeStrategy(s string) (LargeStrategy, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return LargeAuto, nil
	case "rings", "pull":
		return LargeRings, nil
	case "cma":
		return LargeCMA, nil
	case "shared", "pool":
		return LargeShared, nil
	case "engine", "ioat":
		return LargeEngine, nil
	}
	return 0, fmt.Errorf("%w: large-message strategy %q: want auto, rings, cma, shared or engine", ErrBadOptions, s)
}

// DefaultShmEager is the default of LocalOptions.ShmEager (seed 003, Table
// I: eager up to 4 KiB between processes).
const DefaultShmEager = 4096

const (
	cmaMaxSegs    = 4
	cmaEntryWords = 2 + 2*cmaMaxSegs // seq<<1|valid, nsegs, (addr, len)...
	cmaEntryBytes = cmaEntryWords * 8
)

// largeEnv applies GOMX_SHM_LARGE and GOMX_SHM_EAGER.
func (o *LocalOptions) largeEnv() error {
	if v := os.Getenv("GOMX_SHM_LARGE"); v != "" {
		s, err := ParseLargeStrategy(v)
		if err != nil {
			return fmt.Errorf("GOMX_SHM_LARGE: %w", err)
		}
		o.Large = s
	}
	if v := os.Getenv("GOMX_SHM_EAGER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: GOMX_SHM_EAGER=%q: want a byte count (0 keeps the default %d)", ErrBadOptions, v, DefaultShmEager)
		}
		o.ShmEager = n
	}
	if o.Large < LargeAuto || o.Large > LargeEngine {
		return fmt.Errorf("%w: Local.Large %d: want LargeAuto, LargeRings, LargeCMA, LargeShared or LargeEngine", ErrBadOptions, int(o.Large))
	}
	if err := o.engineEnv(); err != nil { // offload.go
		return err
	}
	if o.ShmEager < 0 {
		return fmt.Errorf("%w: Local.ShmEager %d is negative", ErrBadOptions, o.ShmEager)
	}
	if o.ShmEager == 0 {
		o.ShmEager = DefaultShmEager
	}
	return nil
}

// cmaPublish publishes the board's endpoint-table address on its
// shared-memory transports (from NewBoard, before any frame is sent).
func (b *Board) cmaPublish() {
	addr := uint64(uintptr(unsafe.Pointer(&b.cmaEps[0])))
	if tr, ok := b.tr.(*shm.Transport); ok {
		tr.Publish(addr)
	}
	if h := b.host; h != nil {
		h.tr.Publish(addr)
	}
	b.engineHook() // offload.go
}

// cmaOpen gives a new endpoint its region table when the board talks
// shared memory (b.mu held).
func (b *Board) cmaOpen(e *Endpoint) {
	if _, ok := b.tr.(*shm.Transport); !ok && b.host == nil {
		return
	}
	// The table outlives the endpoint (a reopened id reuses it): a peer
	// still reading an address it learned earlier reads cleared entries,
	// never freed memory.
	if b.cmaTabs[e.id] == nil {
		b.cmaTabs[e.id] = make([]uint64, b.opts.Regions*cmaEntryWords)
	}
	e.cmaTab = b.cmaTabs[e.id]
	clear(e.cmaTab)
	b.cmaEps[e.id] = uint64(uintptr(unsafe.Pointer(&e.cmaTab[0])))
}

// cmaClose withdraws a closing endpoint's table (b.mu held): its entries
// are cleared, so no peer copies from buffers the endpoint gave back.
func (b *Board) cmaClose(e *Endpoint) {
	if e.cmaTab != nil {
		clear(e.cmaTab)
		b.cmaEps[e.id] = 0
	}
}

// publishRegion writes region i's entry for r's segments (b.mu held; r.segs
// set). A send with too many segments gets an entry without any, which
// sends its receiver to the rings.
func (e *Endpoint) publishRegion(i int, r *Request) {
	e.publishShared(i, r) // shmpool.go
	if e.cmaTab == nil {
		return
	}
	ent := e.cmaTab[i*cmaEntryWords : (i+1)*cmaEntryWords]
	ent[0] = 0
	n := 0
	for _, s := range r.segs {
		if len(s) == 0 {
			continue
		}
		if n == cmaMaxSegs {
			n = 0
			break
		}
		ent[2+2*n] = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s))))
		ent[3+2*n] = uint64(len(s))
		n++
	}
	ent[1] = uint64(n)
	ent[0] = uint64(e.regions[i].seq)<<1 | 1
}

// shmTo returns the shared-memory transport frames to nic go through, or
// nil (b.mu held).
func (b *Board) shmTo(nic transport.NICID) *shm.Transport {
	if tr, ok := b.tr.(*shm.Transport); ok {
		return tr
	}
	if h := b.host; h != nil && b.txFor(nic) == transport.Transport(h.tr) {
		return h.tr
	}
	return nil
}

// cmaUsable reports whether large messages to or from nic may take the
// single copy (b.mu held).
func (b *Board) cmaUsable(nic transport.NICID) bool {
	switch b.opts.Local.Large {
	case LargeRings:
		return false
	case LargeAuto, LargeShared, LargeEngine:
		if b.cmaRefused {
			return false
		}
	}
	return b.shmTo(nic) != nil
}

// shmRendezvous reports whether an n-byte send to p goes by rendezvous
// because it is above the shared-memory eager threshold and will be copied
// once by the receiver (b.mu held).
func (b *Board) shmRendezvous(p *partner, n int) bool {
	return n > b.opts.Local.ShmEager && (b.cmaUsable(p.nic) || b.sharedUsable(p.nic))
}

// errCMAShort is a process_vm_readv that copied less than asked.
var errCMAShort = errors.New("short process_vm_readv")

// cmaRead copies len(dst) bytes at addr in process pid into dst.
func cmaRead(pid int, dst [][]byte, remote []unix.RemoteIovec) (int, error) {
	var liov [cmaMaxSegs + 4]unix.Iovec
	local := liov[:0]
	want := 0
	for _, d := range dst {
		if len(d) == 0 {
			continue
		}
		v := unix.Iovec{Base: &d[0]}
		v.SetLen(len(d))
		local = append(local, v)
		want += len(d)
	}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err == nil && n != want {
		err = errCMAShort
	}
	return n, err
}

// pullCMA completes a matched large receive of total bytes by copying it
// from the sender's buffer, when the sender is a process of this host that
// published its table and the kernel allows it; it reports whether it took
// the receive over (otherwise the caller pulls). The copy runs in a
// goroutine of its own without b.mu (cmaCopy), and falls back to a pull
// through the rings if the kernel fails it. b.mu held.
func (e *Endpoint) pullCMA(r *Request, p *partner, match uint64, msgLen, total uint32, ref rndvRef) bool {
	b := e.b
	if e.pullShared(r, p, match, msgLen, total, ref) { // shmpool.go: out of the sender's shared segment
		return true
	}
	if !b.cmaUsable(p.nic) {
		return false
	}
	pid, tab, ok := b.shmTo(p.nic).PeerProcess(p.nic)
	if !ok || tab == 0 {
		return false
	}
	// The endpoint's table, then the region's entry.
	var epTab [1]uint64
	if !e.cmaStep(pid, u64Bytes(epTab[:]), uintptr(tab)+uintptr(p.epID)*8, 8) || epTab[0] == 0 {
		return false
	}
	var ent [cmaEntryWords]uint64
	if !e.cmaStep(pid, u64Bytes(ent[:]), uintptr(epTab[0])+uintptr(ref.id)*cmaEntryBytes, cmaEntryBytes) {
		return false
	}
	nsegs := int(ent[1])
	if ent[0] != uint64(ref.seq)<<1|1 || nsegs < 1 || nsegs > cmaMaxSegs {
		return false
	}
	// The message: total bytes from offset ref.off of the region.
	var riov [cmaMaxSegs]unix.RemoteIovec
	remote := riov[:0]
	skip, left := uint64(ref.off), uint64(total)
	for i := 0; i < nsegs && left > 0; i++ {
		addr, l := ent[2+2*i], ent[3+2*i]
		if skip >= l {
			skip -= l
			continue
		}
		n := min(l-skip, left)
		remote = append(remote, unix.RemoteIovec{Base: uintptr(addr + skip), Len: int(n)})
		skip, left = 0, left-n
	}
	if left > 0 {
		return false // the entry does not cover the message: pull and let the sender judge
	}
	var dbuf [cmaMaxSegs + 4][]byte
	dst := dbuf[:0]
	need := int(total)
	for _, s := range r.segs {
		if need == 0 {
			break
		}
		k := min(len(s), need)
		dst = append(dst, s[:k])
		need -= k
	}
	if len(dst) > cmaMaxSegs+4 || need > 0 {
		return false
	}
	// The copy itself runs without the board lock, so other requests
	// progress meanwhile; r belongs to it until it completes r.
	c := &cmaCopy{e: e, r: r, p: p, match: match, msgLen: msgLen, total: total, ref: ref, pid: pid,
		dst: append([][]byte(nil), dst...)}
	c.nr = copy(c.remote[:], remote)
	b.copies.Add(1)
	go c.run()
	return true
}

// cmaCopy is a single copy in flight: a matched large receive being filled
// with process_vm_readv, outside the board lock.
type cmaCopy struct {
	e             *Endpoint
	r             *Request
	p             *partner
	match         uint64
	msgLen, total uint32
	ref           rndvRef
	pid           int
	dst           [][]byte
	nr            int
	remote        [cmaMaxSegs]unix.RemoteIovec
}

// cmaCopyHook, when set by a test, runs before each copy.
var cmaCopyHook func()

// run copies, then completes the receive and notifies the sender, or pulls
// through the rings when the copy failed.
func (c *cmaCopy) run() {
	e := c.e
	b := e.b
	defer b.copies.Done()
	if cmaCopyHook != nil {
		cmaCopyHook()
	}
	_, err := cmaRead(c.pid, c.dst, c.remote[:c.nr])
	b.mu.Lock()
	defer b.unlock()
	b.now = b.clock()
	switch {
	case e.closed:
		e.complete(c.r, ErrEndpointClosed)
	case err != nil:
		e.cmaFailed(err)
		if c.p.dead {
			e.complete(c.r, ErrUnreachable)
			return
		}
		e.ringPull(c.r, c.p, c.match, c.msgLen, c.total, c.ref)
	default:
		e.cnt[RecvCMA]++
		c.p.sendNotify(c.total, c.ref.id, c.ref.seq)
		e.finishRecv(c.r, c.p, c.match, c.msgLen, c.total)
	}
}

// cmaStep reads n bytes at addr in pid into dst, noting a refusal.
func (e *Endpoint) cmaStep(pid int, dst []byte, addr uintptr, n int) bool {
	_, err := cmaRead(pid, [][]byte{dst[:n]}, []unix.RemoteIovec{{Base: addr, Len: n}})
	if err != nil {
		e.cmaFailed(err)
		return false
	}
	return true
}

// cmaFailed counts a process_vm_readv that did not copy; a refusal by the
// kernel (EPERM: Yama or another user) turns LargeAuto off for the board.
func (e *Endpoint) cmaFailed(err error) {
	if errors.Is(err, unix.EPERM) {
		e.cnt[CMARefused]++
		e.b.cmaRefused = true
		return
	}
	e.cnt[CMAFailed]++
}

// u64Bytes views words as bytes.
func u64Bytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
}
