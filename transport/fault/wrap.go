package fault

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// WrapOptions say which frames of a wrapped transport the model applies to.
// Give each wrapped transport of a run its own seeds: two transports with the
// same seed lose the same frame numbers.
type WrapOptions struct {
	// Send applies to the frames the transport sends, Recv to those it
	// receives. Wrapping both ends of a wire with Send faults makes every
	// frame cross the model once, as on the loopback wire.
	Send, Recv Options
}

// Transport is a [transport.Transport] with the fault model applied to the
// frames another transport sends and receives. It keeps the wrapped
// transport's Addr and MTU and its optional capabilities: [transport.Stats]
// (its counters, then the model's), [transport.PeerWatcher] and
// [transport.HostUnique] are forwarded, and answer as a transport without
// them would (no lost peers; not host-unique) when the wrapped one lacks
// them, and so is [transport.Spinner] while Recv passes straight through. A message layer that reaches host-unique boards over shared memory
// instead of the wire (mx's host path) bypasses the faults for those boards:
// turn that path off to put every frame through the model. A layer that
// recognises a transport by its concrete type (mx gives boards on the
// shared-memory transport cross-memory-attach copies of large messages)
// sees only the wrapper: reach the wrapped transport with Unwrap.
//
// With both Options inactive, Send and Recv call the wrapped transport
// directly. Send faults serialise senders on one lock, and held or delayed
// frames are sent by the wrapper's own goroutine; Recv faults are applied by
// the receiving goroutine, which waits in the wrapped Recv no longer than
// until the next held frame is due.
type Transport struct {
	inner transport.Transport
	mtu   int
	opts  WrapOptions

	// Send side: the line's lock guards out, origin, cur and lateBuf.
	send     *Line[uint8] // tagged with each frame's Lane
	out      []transport.Frame
	origin   []int // index in the caller's batch of each frame in out
	cur      int
	emitSend func(Item[uint8])
	lateBuf  [2]transport.Frame
	lateErrs atomic.Uint64 // held or delayed frames the wrapped Send refused

	// Receive side: the one goroutine in Recv.
	recv     *Injector[struct{}]
	ready    []transport.Frame // copies waiting to be handed out, from readyAt
	readyAt  int
	tmp      []transport.Frame
	dst      []transport.Frame // the caller's frames during apply
	n        int               // frames filled in dst
	emitRecv func(Item[struct{}])
	// With receive faults, the frames of a Recv are numbered by the
	// wrapper: refs[k] is the wrapped transport's Ref of frame k when it
	// is the wrapped transport's buffer, 0 when it is the model's copy.
	// lends maps the wrapper's holds to the wrapped transport's.
	refs    []uint64
	inFrame transport.Frame // the wrapped frame being offered to the model
	whole   []byte          // a placed frame made whole for the model (place.go)
	lends   *transport.Lends[uint64]

	// owners are the owners of the regions Register handed out other
	// than the wrapped transport itself (copy on write under ownMu).
	ownMu  sync.Mutex
	owners atomic.Pointer[[]any]

	// Frames passed straight through by a side without faults.
	sendPass, recvPass atomic.Uint64

	closed  atomic.Bool
	once    sync.Once
	closeEr error
	errDone error
}

// Wrap returns t with the faults of o applied. It fails with an error
// wrapping [ErrOptions] for options out of range; t stays the caller's to
// close until Wrap succeeds, and then closing the wrapper closes t.
func Wrap(t transport.Transport, o WrapOptions) (*Transport, error) {
	if t == nil {
		return nil, errors.New("fault: Wrap of a nil transport")
	}
	if err := o.Send.Validate(); err != nil {
		return nil, fmt.Errorf("send faults: %w", err)
	}
	if err := o.Recv.Validate(); err != nil {
		return nil, fmt.Errorf("receive faults: %w", err)
	}
	w := &Transport{inner: t, mtu: t.MTU(), opts: o, lends: transport.NewLends[uint64](1 << 30)}
	w.errDone = fmt.Errorf("fault: wrapper of %v: %w", t.Addr(), transport.ErrClosed)
	if o.Send.Active() {
		w.emitSend = w.appendOut
		w.send = NewLine(o.Send, w.sendLate)
	}
	if o.Recv.Active() {
		w.recv = NewInjector[struct{}](o.Recv)
		w.emitRecv = w.deliverRecv
	}
	return w, nil
}

// Unwrap returns the wrapped transport.
func (w *Transport) Unwrap() transport.Transport { return w.inner }

// Options returns the faults the wrapper applies.
func (w *Transport) Options() WrapOptions { return w.opts }

// Counts returns what the model did to the frames sent and received. A side
// without faults counts the frames it passed through in Frames.
func (w *Transport) Counts() (send, recv Counts) {
	send.Frames, recv.Frames = w.sendPass.Load(), w.recvPass.Load()
	if w.send != nil {
		send = w.send.Counts()
	}
	if w.recv != nil {
		recv = w.recv.Counts()
	}
	return send, recv
}

// Addr returns the wrapped transport's NIC id.
func (w *Transport) Addr() transport.NICID { return w.inner.Addr() }

// MTU returns the wrapped transport's MTU.
func (w *Transport) MTU() int { return w.mtu }

// HostUniqueNIC reports what the wrapped transport reports, or false when it
// does not implement [transport.HostUnique].
func (w *Transport) HostUniqueNIC() bool {
	hu, ok := w.inner.(transport.HostUnique)
	return ok && hu.HostUniqueNIC()
}

// SpinCheap implements [transport.Spinner]: it reports what the wrapped
// transport reports when Recv passes straight through to it (no receive
// faults), and false otherwise (a Recv with receive faults waits for the
// frames the model holds).
func (w *Transport) SpinCheap() bool {
	sp, ok := w.inner.(transport.Spinner)
	return ok && w.recv == nil && sp.SpinCheap()
}

// RecvWaker returns the wrapped transport's [transport.Waker] when Recv
// passes straight through to it (no receive faults), and nil otherwise:
// waking it then ends the wrapper's waiting Recv. The wrapper is not a
// Waker itself, as it could not keep that promise with receive faults or
// around a transport that is not one.
func (w *Transport) RecvWaker() transport.Waker {
	if wk, ok := w.inner.(transport.Waker); ok && w.recv == nil {
		return wk
	}
	return nil
}

var _ transport.Served = (*Transport)(nil)

// Served implements [transport.Served]: it forwards to the wrapped
// transport when Recv passes straight through to it (no receive faults),
// and does nothing otherwise (the wrapper's Recv then waits on its own).
func (w *Transport) Served() {
	if sv, ok := w.inner.(transport.Served); ok && w.recv == nil {
		sv.Served()
	}
}

// LostPeers forwards to the wrapped transport's [transport.PeerWatcher], and
// returns dst unchanged when it has none.
func (w *Transport) LostPeers(dst []transport.NICID) []transport.NICID {
	if pw, ok := w.inner.(transport.PeerWatcher); ok {
		return pw.LostPeers(dst)
	}
	return dst
}

// Counters returns the wrapped transport's counters (when it implements
// [transport.Stats]), then the model's: fault_send_* and fault_recv_* for
// frames offered, dropped, duplicated, reordered, corrupted and delayed, and
// fault_send_late_errors for held or delayed frames the wrapped transport
// refused to send.
func (w *Transport) Counters() []transport.Counter {
	var cs []transport.Counter
	if s, ok := w.inner.(transport.Stats); ok {
		cs = s.Counters()
	}
	send, recv := w.Counts()
	for _, d := range []struct {
		dir string
		c   Counts
	}{{"send", send}, {"recv", recv}} {
		cs = append(cs,
			transport.Counter{Name: "fault_" + d.dir + "_frames", Value: d.c.Frames},
			transport.Counter{Name: "fault_" + d.dir + "_dropped", Value: d.c.Dropped},
			transport.Counter{Name: "fault_" + d.dir + "_duplicated", Value: d.c.Duplicated},
			transport.Counter{Name: "fault_" + d.dir + "_reordered", Value: d.c.Reordered},
			transport.Counter{Name: "fault_" + d.dir + "_corrupted", Value: d.c.Corrupted},
			transport.Counter{Name: "fault_" + d.dir + "_delayed", Value: d.c.Delayed},
		)
	}
	cs = append(cs, transport.Counter{Name: "fault_send_late_errors", Value: w.lateErrs.Load()})
	if w.recv != nil {
		// Holds through the model (the wrapped transport counts only
		// those it lends).
		cs = append(cs, w.lends.Counters("fault_")...)
	}
	return cs
}

// Send offers frames to the model in order and sends what it lets through
// with one call of the wrapped Send. It returns len(frames) when every frame
// was lost, held or sent; a frame longer than the MTU fails with an error
// wrapping [transport.ErrTooBig] (the frames before it went through the
// model), and an error of the wrapped Send is returned for the frame whose
// delivery failed. Errors sending a held or delayed frame later are counted
// (fault_send_late_errors), as a wire would lose that frame.
func (w *Transport) Send(frames []transport.Frame) (rn int, rerr error) {
	if w.send == nil {
		n, err := w.inner.Send(frames)
		w.sendPass.Add(uint64(n))
		return n, err
	}
	if w.closed.Load() {
		return 0, w.errDone
	}
	// Frames of regions take the model's way, copied like any other.
	if k, err := w.copyRegions(frames); err != nil {
		frames = frames[:k]
		defer func() {
			if rerr == nil {
				rn, rerr = k, fmt.Errorf("fault: wrapper of %v: %w", w.inner.Addr(), err)
			}
		}()
	}
	l := w.send
	l.Lock()
	defer l.Unlock()
	now := time.Now()
	sent, tooBig := len(frames), error(nil)
	for i := range frames {
		data := frames[i].Data
		if h := frames[i].Head; len(h) > 0 {
			// A header in front of region bytes (transport.Frame.Head):
			// the model takes the frame whole, as it copies it.
			data = append(append(make([]byte, 0, len(h)+len(data)), h...), data...)
		}
		if len(data) > w.mtu {
			sent = i
			tooBig = fmt.Errorf("fault: wrapper of %v: frame %d: %d bytes exceeds MTU %d: %w", w.inner.Addr(), i, len(data), w.mtu, transport.ErrTooBig)
			break
		}
		w.cur = i
		l.Frame(now, frames[i].Lane, frames[i].Peer, data, w.emitSend)
	}
	if len(w.out) > 0 {
		k, err := w.inner.Send(w.out)
		if err != nil {
			sent, tooBig = w.origin[min(k, len(w.origin)-1)], err
		}
		clear(w.out) // keep no reference to the caller's frames
		w.out, w.origin = w.out[:0], w.origin[:0]
	}
	return sent, tooBig
}

// appendOut queues a frame the model let through for the wrapped Send (line
// lock held).
func (w *Transport) appendOut(it Item[uint8]) {
	for range it.Copies {
		w.out = append(w.out, transport.Frame{Peer: it.Peer, Data: it.Data, Lane: it.Tag})
		w.origin = append(w.origin, w.cur)
	}
}

// sendLate sends a held or delayed frame when it is due (line lock held).
func (w *Transport) sendLate(it Item[uint8]) {
	b := w.lateBuf[:0]
	for range it.Copies {
		b = append(b, transport.Frame{Peer: it.Peer, Data: it.Data, Lane: it.Tag})
	}
	if _, err := w.inner.Send(b); err != nil {
		w.lateErrs.Add(1)
	}
	clear(w.lateBuf[:])
}

// Recv fills frames with frames the model let through; see
// [transport.Transport.Recv]. A frame handed out as the wrapped transport
// returned it stays valid until the next Recv, like the wrapped
// transport's, and keeps the Lane the wrapped transport gave it; held,
// delayed, corrupted and surplus duplicated frames are copies the wrapper
// made, with Lane 0, and so is the second copy of a frame duplicated at
// once: a copy took no posting of a lane in the batch that delivers it
// (its original took one, in the batch it arrived in), so a caller that
// counts a batch's frames by lane counts only the frames that did.
func (w *Transport) Recv(frames []transport.Frame, timeout time.Duration) (int, error) {
	if w.recv == nil {
		n, err := w.inner.Recv(frames, timeout)
		w.recvPass.Add(uint64(n))
		return n, err
	}
	w.lends.Recv()
	if cap(w.refs) < len(frames) {
		w.refs = make([]uint64, len(frames))
	}
	w.refs = w.refs[:len(frames)]
	n, err := w.recvFaulty(frames, timeout)
	for k := range frames[:n] {
		frames[k].Ref = w.lends.RecvRef(k)
	}
	w.lends.Got(n)
	return n, err
}

// recvFaulty is Recv with receive faults; it fills refs.
func (w *Transport) recvFaulty(frames []transport.Frame, timeout time.Duration) (int, error) {
	if w.closed.Load() {
		return 0, w.errDone
	}
	if len(frames) == 0 {
		return w.inner.Recv(frames, 0)
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		now := time.Now()
		w.recv.Due(now, w.queueReady)
		n := w.takeReady(frames)
		if n == len(frames) {
			return n, nil
		}
		// Past the deadline, poll once more: what was due by now is
		// already out, above.
		final := timeout > 0 && !now.Before(deadline)
		// Wait for the wrapped transport no longer than the caller's
		// timeout and the next held frame's due time.
		wait := time.Duration(0)
		if n == 0 && timeout != 0 && !final {
			wait = -1
			if timeout > 0 {
				wait = max(deadline.Sub(now), 0)
			}
			if next, ok := w.recv.Next(); ok {
				if d := max(next.Sub(now), time.Microsecond); wait < 0 || d < wait {
					wait = d
				}
			}
		}
		room := len(frames) - n
		if cap(w.tmp) < room {
			w.tmp = make([]transport.Frame, room)
		}
		tmp := w.tmp[:room]
		m, err := w.inner.Recv(tmp, wait)
		w.dst, w.n = frames, n
		now = time.Now()
		for i := range tmp[:m] {
			w.inFrame = tmp[i]
			w.recv.Frame(now, struct{}{}, tmp[i].Peer, w.modelData(tmp[i]), w.emitRecv)
		}
		w.inFrame = transport.Frame{}
		n = w.n
		w.dst = nil
		clear(tmp[:m])
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		if n > 0 || timeout == 0 || final {
			return n, nil
		}
	}
}

// deliverRecv puts a received frame the model let through into the caller's
// frames, or, when they are full, a copy of it into the ready queue.
func (w *Transport) deliverRecv(it Item[struct{}]) {
	// lane is the wrapped frame's Lane, for the first copy delivered as
	// it arrived only: a duplicate took no posting of its own.
	lane := w.inFrame.Lane
	for range it.Copies {
		if w.n < len(w.dst) {
			if w.direct(it.Data) {
				// The placed frame itself, not a copy the model made:
				// delivered as it arrived, split (place.go).
				w.dst[w.n] = transport.Frame{Peer: it.Peer, Data: w.inFrame.Data, Placed: w.inFrame.Placed, Lane: lane}
				w.refs[w.n] = w.inFrame.Ref
				w.n++
				lane = 0
				continue
			}
			w.dst[w.n] = transport.Frame{Peer: it.Peer, Data: it.Data}
			w.refs[w.n] = 0
			if in := w.inFrame.Data; len(in) > 0 && len(it.Data) == len(in) && &it.Data[0] == &in[0] {
				w.refs[w.n] = w.inFrame.Ref // the wrapped transport's buffer
				w.dst[w.n].Lane = lane
				lane = 0
			}
			w.n++
			continue
		}
		w.ready = append(w.ready, transport.Frame{Peer: it.Peer, Data: clone(it.Data)})
	}
}

// queueReady queues a held or delayed frame that is due; its Data is the
// model's copy.
func (w *Transport) queueReady(it Item[struct{}]) {
	for range it.Copies {
		w.ready = append(w.ready, transport.Frame{Peer: it.Peer, Data: it.Data})
	}
}

// takeReady hands out queued frames, oldest first.
func (w *Transport) takeReady(frames []transport.Frame) int {
	n := copy(frames, w.ready[w.readyAt:])
	clear(w.refs[:n])
	w.readyAt += n
	if w.readyAt == len(w.ready) {
		clear(w.ready)
		w.ready, w.readyAt = w.ready[:0], 0
	}
	return n
}

// Hold keeps a received frame; see [transport.Transport.Hold]. Without
// receive faults it is the wrapped transport's Hold. With them, a frame the
// wrapped transport returned is held by it (it lends or copies as it says),
// and a copy the model made is copied once more, so no hold ever pins the
// model's buffers.
func (w *Transport) Hold(f *transport.Frame) (transport.HoldInfo, error) {
	if w.recv == nil {
		return w.inner.Hold(f)
	}
	k, err := w.lends.Index(f.Ref)
	if err != nil {
		return transport.HoldInfo{}, fmt.Errorf("fault: wrapper of %v: hold: %w", w.inner.Addr(), err)
	}
	if in := w.refs[k]; in != 0 {
		g := transport.Frame{Peer: f.Peer, Data: f.Data, Ref: in}
		if info, err := w.inner.Hold(&g); err == nil {
			// A duplicate of a frame already held fails above and is
			// copied below.
			w.lends.Lend(f, g.Ref)
			f.Data = g.Data
			w.refs[k] = 0
			return info, nil
		}
	}
	w.lends.CopyOut(f)
	return transport.HoldInfo{Copied: true}, nil
}

// Release ends a hold; see [transport.Transport.Release].
func (w *Transport) Release(f *transport.Frame) {
	if w.recv == nil {
		w.inner.Release(f)
		return
	}
	if in, ok := w.lends.Return(f); ok {
		w.inner.Release(&transport.Frame{Ref: in})
	}
}

// Register registers mem with the wrapped transport. Without send faults,
// frames of the region go to the wrapped transport as they are (in place
// where it sends in place); with them they pass through the model, which
// copies them, a Frame.Head and Data together. The region is the wrapped
// transport's, owned by whatever its Register forwards to (a transport it
// embeds or wraps in turn), and Send takes frames of the regions of every
// owner Register met.
func (w *Transport) Register(mem []byte) (*transport.Region, error) {
	r, err := w.inner.Register(mem)
	if err == nil {
		w.addOwner(r.Owner())
	}
	return r, err
}

// addOwner records the owner of a region Register handed out.
func (w *Transport) addOwner(o any) {
	if o == any(w.inner) {
		return
	}
	w.ownMu.Lock()
	defer w.ownMu.Unlock()
	old := w.owners.Load()
	var cur []any
	if old != nil {
		cur = *old
	}
	for _, x := range cur {
		if x == o {
			return
		}
	}
	next := append(append(make([]any, 0, len(cur)+1), cur...), o)
	w.owners.Store(&next)
}

// copyRegions is transport.CopyRegions for the wrapper, whose frames of
// regions may be owned by the wrapped transport or by one Register met
// behind it: it checks each against its owner when the wrapper knows
// that owner (against the wrapped transport otherwise, which fails for a
// foreign region) and counts its copy.
func (w *Transport) copyRegions(frames []transport.Frame) (int, error) {
	owners := w.owners.Load()
	for i := range frames {
		f := &frames[i]
		r := f.Region
		if r == nil {
			continue
		}
		owner := any(w.inner)
		if o := r.Owner(); o != owner && owners != nil {
			for _, x := range *owners {
				if x == o {
					owner = o
					break
				}
			}
		}
		if err := r.Check(owner, f); err != nil {
			return i, fmt.Errorf("frame %d: %w", i, err)
		}
		r.Copied()
	}
	return len(frames), nil
}

// Close stops the send side's goroutine, dropping the frames it holds, and
// closes the wrapped transport, returning its error. A blocked Recv returns
// the wrapped transport's ErrClosed; later calls return one too. It is safe
// to call more than once.
func (w *Transport) Close() error {
	w.once.Do(func() {
		w.closed.Store(true)
		if w.send != nil {
			w.send.Close()
		}
		w.closeEr = w.inner.Close() // which ends the holds of its buffers
		w.lends.Close()
	})
	return w.closeEr
}

// Interface checks.
var (
	_ transport.Transport   = (*Transport)(nil)
	_ transport.Stats       = (*Transport)(nil)
	_ transport.PeerWatcher = (*Transport)(nil)
	_ transport.HostUnique  = (*Transport)(nil)
)
