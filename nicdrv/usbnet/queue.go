package usbnet

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
)

// The NIC's data path: the goroutine that reads the bulk IN pipe and
// moves the frames it gets (one per transfer for ECM, those of each NTB
// for NCM) through the driver's receive filter into the RX ring; RxBatch
// and WaitRx, which hand them to the caller; TxBatch, which queues frames,
// and the goroutine that writes them to the bulk OUT pipe and reclaims
// their buffers. Bring-up, the link, filters, statistics and closing are
// in usbnet.go; the NTB format in ntb.go.

// accept is the driver's receive filter.
func (n *NIC) accept(dst []byte) bool {
	var m nicdrv.MAC
	copy(m[:], dst)
	if m == n.mac || m == (nicdrv.MAC{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}) {
		return true
	}
	n.flt.mu.Lock()
	defer n.flt.mu.Unlock()
	if n.flt.promisc {
		return true
	}
	if m.IsMulticast() {
		for _, g := range n.flt.groups {
			if g == m {
				return true
			}
		}
	}
	return false
}

// receive reads the bulk IN pipe and moves the frames into the RX ring.
func (n *NIC) receive(in ReadStream, size int) {
	defer n.wg.Done()
	buf := make([]byte, size)
	frames := make([][]byte, 0, 256)
	for {
		k, err := in.Read(n.ctx, buf)
		if err != nil {
			if n.ctx.Err() == nil {
				n.fail("bulk IN", err)
			}
			return
		}
		frames = frames[:0]
		if n.fn.Model == NCM {
			if frames, err = ParseNTB16(buf[:k], frames); err != nil {
				n.st.rxErrors.Add(1)
				continue
			}
		} else if k > 0 {
			if k < 14 || k > n.maxFrame {
				n.st.rxErrors.Add(1)
				continue
			}
			frames = append(frames, buf[:k])
		}
		if !n.deliver(frames) {
			return
		}
	}
}

// deliver copies frames into spare buffers, waiting for RxBatch to give
// the ring buffers when it has none. It reports false when the NIC closed.
func (n *NIC) deliver(frames [][]byte) bool {
	r := &n.rx
	got := false
	r.mu.Lock()
	for _, fr := range frames {
		if len(fr) > n.maxFrame {
			n.st.rxDropped.Add(1)
			continue
		}
		if !n.accept(fr) {
			continue
		}
		for len(r.spare) == 0 {
			if n.closed.Load() {
				r.mu.Unlock()
				return false
			}
			r.room.Wait()
		}
		b := r.spare[len(r.spare)-1]
		r.spare = r.spare[:len(r.spare)-1]
		copy(b.SetLen(len(fr)), fr)
		b.Queue, b.Flags, b.Hash = 0, 0, 0
		r.ready[(r.head+r.n)%len(r.ready)] = b
		r.n++
		got = true
		n.st.rxFrames.Add(1)
		n.st.rxBytes.Add(uint64(len(fr) + fcs))
		if fr[0]&1 != 0 {
			if fr[0] == 0xFF && fr[1] == 0xFF && fr[2] == 0xFF && fr[3] == 0xFF && fr[4] == 0xFF && fr[5] == 0xFF {
				n.st.rxBroadcast.Add(1)
			} else {
				n.st.rxMulticast.Add(1)
			}
		}
	}
	r.mu.Unlock()
	if got {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	return true
}

// transmit sends what TxBatch queued: one frame per transfer for ECM, as
// many frames as fit one NTB for NCM. It keeps up to OutFlight transfers
// in flight: a transfer is submitted as soon as its frames are taken and a
// slot is free, and settle, on a goroutine of its own, waits for them in
// the order they were submitted, counts what they sent and frees their
// slots. The device receives the transfers in submission order, so frames
// keep their order whatever the number in flight.
func (n *NIC) transmit() {
	t := &n.tx
	out := n.fn.BulkOut
	size := n.maxFrame
	var w *NTBWriter
	if n.fn.Model == NCM {
		p := n.ntbOut
		size = min(n.opts.NTBSize, p.OutMaxSize)
		w = NewNTBWriter(size, p.OutMaxDatagrams, p.OutDivisor, p.OutRemainder, p.OutAlign)
	}
	// The slots of the transfers in flight, and the transfers in the
	// order submitted, for settle.
	slots := make(chan struct{}, n.opts.OutFlight)
	flight := make(chan outTransfer, n.opts.OutFlight)
	go n.settle(flight, slots)
	defer close(flight)
	defer n.wg.Done()
	buf := make([]byte, size)
	batch := make([]*nicdrv.Buffer, 0, 1024)
	for {
		t.mu.Lock()
		for t.n == 0 && !n.closed.Load() {
			t.work.Wait()
		}
		if n.closed.Load() {
			t.mu.Unlock()
			return
		}
		// Take the frames of one transfer.
		batch = batch[:0]
		var xfer []byte
		if w == nil {
			b := t.q[t.head]
			batch = append(batch, b)
			ext, _ := b.Attached()
			xfer = append(append(buf[:0], b.Data...), ext...)
		} else {
			w.Reset(buf)
			for t.n > len(batch) {
				b := t.q[(t.head+len(batch))%len(t.q)]
				ext, _ := b.Attached()
				if !w.Add(b.Data, ext) {
					break
				}
				batch = append(batch, b)
			}
			if len(batch) == 0 {
				// Unreachable with frames of at most maxFrame bytes;
				// dropping the frame keeps the queue moving regardless.
				batch = append(batch, t.q[t.head])
				n.st.txRejected.Add(1)
				t.q[t.head] = nil
				t.head = (t.head + 1) % len(t.q)
				t.n--
				t.mu.Unlock()
				n.reclaim(batch)
				continue
			}
			xfer = w.Finish(out.MaxPacket)
		}
		for range batch {
			t.q[t.head] = nil
			t.head = (t.head + 1) % len(t.q)
			t.n--
		}
		t.mu.Unlock()
		ot := outTransfer{frames: len(batch)}
		for _, b := range batch {
			ot.bytes += b.FrameLen() + fcs
			if ext, _ := b.Attached(); ext != nil {
				ot.bytes += len(ext)
			}
		}
		// The frames are copied: give the buffers back now, or, those
		// with an attachment, at the next TxBatch, which calls their
		// completions.
		n.reclaim(batch)
		n.lk.mu.Lock()
		up := n.lk.link.Up
		n.lk.mu.Unlock()
		if !up {
			continue // a NIC without link drops what it is given
		}
		select {
		case slots <- struct{}{}:
		case <-n.ctx.Done():
			return
		}
		tr, err := n.dev.Submit(n.ctx, out.Address, xfer)
		if err != nil {
			<-slots
			// A transfer the device refused loses its frames, as a
			// NIC loses what it cannot send; a device that is gone
			// stops the NIC.
			if n.ctx.Err() == nil && errors.Is(err, ErrGone) {
				n.fail("bulk OUT", err)
				return
			}
			continue
		}
		ot.t = tr
		n.tx.inFlight.Add(1)
		flight <- ot // never blocks: a slot was free
	}
}

// outTransfer is a bulk OUT transfer in flight and what it carries.
type outTransfer struct {
	t      Transfer
	frames int
	bytes  int
}

// settle waits for the transfers transmit submitted, oldest first, counts
// the frames of those that completed and frees their slots, until
// transmit closes flight. A transfer that fails loses its frames; one
// that finds the device gone stops the NIC. Once the NIC closes, the
// context is cancelled and each Wait cancels its transfer.
func (n *NIC) settle(flight <-chan outTransfer, slots <-chan struct{}) {
	for ot := range flight {
		_, err := ot.t.Wait(n.ctx)
		n.tx.inFlight.Add(-1)
		<-slots
		if err != nil {
			if n.ctx.Err() == nil && errors.Is(err, ErrGone) {
				n.fail("bulk OUT", err)
			}
			continue
		}
		n.st.txFrames.Add(uint64(ot.frames))
		n.st.txBytes.Add(uint64(ot.bytes))
	}
	n.wg.Done()
}

// OutInFlight is how many bulk OUT transfers are in flight now: submitted
// to the device and not yet settled (at most Options.OutFlight).
func (n *NIC) OutInFlight() int { return int(n.tx.inFlight.Load()) }

// reclaim frees sent buffers without attachments and parks the others for
// TxBatch, which calls their completions. It reorders batch.
func (n *NIC) reclaim(batch []*nicdrv.Buffer) {
	k := 0
	for _, b := range batch {
		if ext, _ := b.Attached(); ext != nil {
			n.tx.mu.Lock()
			n.tx.sent = append(n.tx.sent, b)
			n.tx.mu.Unlock()
			continue
		}
		batch[k] = b
		k++
	}
	_ = n.pool.Free(batch[:k]...)
}

// RxBatch implements nicdrv.NIC. After the device is gone it returns the
// frames already received, then the error.
func (n *NIC) RxBatch(q int, bufs []*nicdrv.Buffer) (int, error) {
	if err := n.check(q, "RxBatch"); err != nil {
		return 0, err
	}
	r := &n.rx
	r.mu.Lock()
	k := min(len(bufs), r.n)
	for i := range k {
		bufs[i] = r.ready[r.head]
		r.ready[r.head] = nil
		r.head = (r.head + 1) % len(r.ready)
	}
	r.n -= k
	if need := len(r.ready) - r.n - len(r.spare); need > 0 {
		have := len(r.spare)
		got, _ := n.pool.Alloc(r.spare[have : have+need])
		r.spare = r.spare[:have+got]
		if got < need {
			n.st.rxNoBuffer.Add(uint64(need - got))
		}
		if got > 0 {
			r.room.Signal()
		}
	}
	r.mu.Unlock()
	if k == 0 {
		if f := n.fault.Load(); f != nil {
			return 0, f
		}
		// Frames come from the pipe goroutines: a caller that polls an
		// empty ring gives them the processor, which on a machine with
		// few cores they would otherwise get only at preemption.
		runtime.Gosched()
	}
	return k, nil
}

// TxBatch implements nicdrv.NIC. Frames are copied into the bulk OUT
// transfers, so memory attached with Buffer.Attach is read once, when its
// frame is sent; its completion comes at a later TxBatch. Checksums the
// flags ask for are computed by the driver; with an attachment they are
// refused (ErrNotSupported).
func (n *NIC) TxBatch(q int, bufs []*nicdrv.Buffer) (int, error) {
	if err := n.check(q, "TxBatch"); err != nil {
		return 0, err
	}
	t := &n.tx
	t.mu.Lock()
	if len(t.sent) > 0 {
		t.scratch = append(t.scratch[:0], t.sent...)
		clear(t.sent)
		t.sent = t.sent[:0]
	}
	t.mu.Unlock()
	if len(t.scratch) > 0 {
		_ = n.pool.Free(t.scratch...)
		clear(t.scratch)
		t.scratch = t.scratch[:0]
	}
	if f := n.fault.Load(); f != nil {
		return 0, f
	}
	var bad error
	t.mu.Lock()
	took := 0
	for _, b := range bufs {
		if t.n == len(t.q) {
			break
		}
		ext, _ := b.Attached()
		size := len(b.Data) + len(ext)
		switch {
		case b.Next != nil:
			bad = fmt.Errorf("a chained buffer (Next set): %w", nicdrv.ErrFrameSize)
		case size < 14 || size > n.maxFrame:
			bad = fmt.Errorf("frame of %d bytes, want 14..%d: %w", size, n.maxFrame, nicdrv.ErrFrameSize)
		case ext != nil && b.Flags&(nicdrv.FlagTxIPChecksum|nicdrv.FlagTxL4Checksum) != 0:
			bad = fmt.Errorf("checksum offload of a frame with attached memory: %w", nicdrv.ErrNotSupported)
		}
		if bad != nil {
			n.st.txRejected.Add(1)
			break
		}
		nicdrv.FillChecksums(b.Data, b.Flags)
		t.q[(t.head+t.n)%len(t.q)] = b
		t.n++
		took++
	}
	if took > 0 {
		t.work.Signal()
	}
	t.mu.Unlock()
	if bad != nil {
		return took, n.errorf("TxBatch", bad)
	}
	if took < len(bufs) {
		n.st.txRingFull.Add(1)
	}
	return took, nil
}

// WaitRx implements nicdrv.NIC (queue 0 is the only one): it sleeps
// until the receive goroutine delivers a frame, ctx ends, deadline passes
// (one timer, made when the first look finds no frame), the NIC closes
// or its device fails.
func (n *NIC) WaitRx(ctx context.Context, deadline time.Time, queues ...int) (int, error) {
	for _, q := range queues {
		if err := n.check(q, "WaitRx"); err != nil {
			return 0, err
		}
	}
	if err := n.check(0, "WaitRx"); err != nil {
		return 0, err
	}
	var timeout <-chan time.Time
	for {
		n.rx.mu.Lock()
		ready := n.rx.n > 0
		n.rx.mu.Unlock()
		if ready {
			return 0, nil
		}
		if f := n.fault.Load(); f != nil {
			return 0, f
		}
		if !deadline.IsZero() && timeout == nil {
			d := time.Until(deadline)
			if d <= 0 {
				return 0, context.DeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-n.rx.kick:
			n.st.wakeups.Add(1)
		case <-timeout:
			return 0, context.DeadlineExceeded
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-n.closedCh:
			return 0, n.errorf("WaitRx", nicdrv.ErrClosed)
		}
	}
}
