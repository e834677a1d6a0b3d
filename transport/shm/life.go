package shm

import (
	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// The end of a transport's life: Close, which undoes what Open built, and the
// counters of what it moved.

// Close first moves the frames waiting in backlogs into their receivers'
// queues (waiting while they take frames, at most Options.FullWait for
// one that takes none), then stops accepting producers, closes every
// connection (the peers then drop their rings), waits for a running Recv
// to leave, and unmaps every ring and the doorbell. The socket file is
// removed.
func (t *Transport) Close() error {
	if t.closed.Load() {
		return nil
	}
	t.drainBacklogs() // lane.go
	if t.closed.Swap(true) {
		return nil
	}
	close(t.closing)  // a ShareSegments waiting for acknowledgements returns
	t.ring()          // a sleeping Recv returns ErrClosed
	t.roomBell.ring() // a sleeping flusher returns
	// A flusher starts only under blMu with closed unset (listBacklog):
	// past this, none starts, and Wait below waits for the one that runs.
	t.blMu.Lock()
	//lint:ignore SA2001 the section is empty: taking the lock is the point (see above)
	t.blMu.Unlock()
	t.spareFD.wake() // fdlimit.go: an accept loop waiting at the limit returns
	err := t.ln.Close()
	t.outMu.Lock()
	p := t.pool
	t.outMu.Unlock()
	if p != nil {
		p.Close()
	}
	t.outMu.Lock()
	t.lastOut.Store(nil)
	clear(t.sendTo[:]) // its sender is serialized with Close (SerialSends)
	t.outSnap.Store(nil)
	for p, o := range t.out {
		o.close()
		t.cnt.sent.Add(o.sent.Load())
		delete(t.out, p)
	}
	t.outMu.Unlock()
	t.inMu.Lock()
	for _, r := range *t.in.Load() {
		r.conn.Close()
	}
	t.inMu.Unlock()
	t.wg.Wait()
	t.spareFD.give() // fdlimit.go: accept has returned
	t.dropSpares()   // spare.go: no goroutine makes one any more
	t.closeDirList() // footprint.go
	t.rmu.Lock()
	t.inMu.Lock()
	for _, r := range *t.in.Load() {
		t.dropSegments(r)
		r.closeRoom()
		r.seg.unmap()
		r.data = nil
	}
	t.setIn(nil)
	t.inMu.Unlock()
	t.hot, t.touched = nil, nil
	t.bell.unmap()
	unix.Close(t.bellFd)
	t.ev.close()
	t.roomBell.close()
	t.lends.Close()
	t.rmu.Unlock()
	return err
}

// sent is the count of frames sent: those of the rings gone and those of
// the live ones.
func (t *Transport) sent() uint64 {
	t.outMu.Lock()
	n := t.cnt.sent.Load()
	for _, o := range t.out {
		n += o.sent.Load()
	}
	t.outMu.Unlock()
	return n
}

// Counters reports frames moved, what went wrong, and the shared memory
// the transport maps now (see Footprint).
func (t *Transport) Counters() []transport.Counter {
	fp := t.Footprint()
	return []transport.Counter{
		{Name: "shm frames sent", Value: t.sent()},
		{Name: "shm frames received", Value: t.recvd.Load()},
		{Name: "shm frames dropped (ring full)", Value: t.cnt.dropFull.Load()},
		{Name: "shm corrupt rings dropped", Value: t.cnt.corrupt.Load()},
		{Name: "shm peers gone", Value: t.cnt.peersGone.Load()},
		{Name: "shm connections refused", Value: t.cnt.refused.Load()},
		{Name: "shm receiver sleeps", Value: t.cnt.sleeps.Load()},
		{Name: "shm receiver wake-ups sent", Value: t.cnt.wakes.Load()},
		{Name: "shm receiver yields", Value: t.cnt.yields.Load()},
		{Name: "shm stale sockets removed at open", Value: t.cnt.stale.Load()},
		{Name: "shm frames sent in place", Value: t.cnt.inPlace.Load()},
		{Name: "shm in-place frames dropped (memory not shared)", Value: t.cnt.refBad.Load()},
		{Name: "shm cold rings made hot", Value: t.cnt.promotions.Load()},
		{Name: "shm lanes opened", Value: t.cnt.lanes.Load()},
		{Name: "shm lanes refused by peers", Value: t.cnt.lanesRefused.Load()},
		{Name: "shm spare lanes made", Value: t.cnt.spares.Load()},
		{Name: "shm spare lanes taken by pairs", Value: t.cnt.sparesTaken.Load()},
		{Name: CounterLanesRetired, Value: t.cnt.lanesRetired.Load()},
		{Name: "shm lanes retired by peers", Value: t.cnt.lanesClosedIn.Load()},
		{Name: CounterLanesAskedBack, Value: t.cnt.askedBack.Load()},
		{Name: "shm lanes kept for busier pairs and taken", Value: t.cnt.granted.Load()},
		{Name: "shm lane asks and kept lanes lapsed", Value: t.cnt.askLapsed.Load()},
		{Name: "shm lanes retired at the consumer's ask", Value: t.cnt.retiredAsked.Load()},
		{Name: "shm queue claims of dead producers skipped", Value: t.cnt.qSkipped.Load()},
		{Name: "shm queue broken by a producer", Value: t.cnt.qBroken.Load()},
		{Name: "shm frames that waited in a backlog", Value: t.cnt.backlogged.Load()},
		{Name: "shm room bells written for producers' backlogs", Value: t.cnt.roomWakes.Load()},
		{Name: CounterMappedBytes, Value: uint64(fp.MappedBytes)},
		{Name: CounterOwnedBytes, Value: uint64(fp.OwnedBytes)},
		{Name: "shm ring bytes mapped", Value: uint64(fp.RingBytes)},
		{Name: "shm pool bytes mapped", Value: uint64(fp.PoolBytes)},
		{Name: "shm spare lane bytes mapped", Value: uint64(fp.SpareBytes)},
		{Name: CounterRingsWritten, Value: uint64(fp.RingsOut)},
		{Name: CounterRingsRead, Value: uint64(fp.RingsIn)},
		{Name: "shm peers with rings", Value: uint64(fp.Peers)},
	}
}
