package nic_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated/nicpair"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

// queuedBoards makes a UDP-framed board transport on each NIC and opens
// every queue of both.
func queuedBoards(t *testing.T, ns [2]nicdrv.NIC) (boards [2]*nic.Transport, qs [2][]transport.Transport) {
	boards = nicpair.Transports(t, ns, nicpair.UDP)
	for i, b := range boards {
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("close board %d: %v", i, err)
			}
		})
		for q := range b.Queues() {
			x, err := b.OpenQueue(q)
			if err != nil {
				t.Fatal(err)
			}
			qs[i] = append(qs[i], x)
		}
	}
	return boards, qs
}

// counter reads one of a transport's counters.
func counter(tr transport.Transport, name string) uint64 {
	for _, c := range tr.(transport.Stats).Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// receiveAll receives on every queue transport of a board, one after the
// other from this goroutine, until want frames arrived on queue at or the
// deadline; it returns how many frames each queue got.
func receiveAll(t *testing.T, qs []transport.Transport, at, want int) []int {
	t.Helper()
	got := make([]int, len(qs))
	frames := make([]transport.Frame, 16)
	deadline := time.Now().Add(10 * time.Second)
	for got[at] < want && time.Now().Before(deadline) {
		for q, x := range qs {
			n, err := x.Recv(frames, 0)
			if err != nil {
				t.Fatal(err)
			}
			got[q] += n
		}
	}
	// Whatever is still on its way to another queue gets a last look.
	for q, x := range qs {
		n, _ := x.Recv(frames, 0)
		got[q] += n
	}
	return got
}

// sendN sends n frames from tr to peer.
func sendN(t *testing.T, tr transport.Transport, peer transport.NICID, n int) {
	t.Helper()
	for i := range n {
		if _, err := tr.Send([]transport.Frame{{Peer: peer, Data: []byte(fmt.Sprintf("frame %d", i))}}); err != nil {
			t.Fatal(err)
		}
	}
}

// On the 82599 every queue's port is steered by a NIC rule: frames sent to
// queue q's NIC id arrive on queue q's transport and on no other.
func TestQueuesSteer82599(t *testing.T) {
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing, o.TxRing = 4, 128, 128
	_, qs := queuedBoards(t, nicpair.IXGBE(t, o))
	for q := range 4 {
		if st := counter(qs[0][q], "nic_queue_forwarded"); st != 0 {
			t.Fatalf("queue %d forwarded %d frames", q, st)
		}
		sendN(t, qs[1][(q+1)%4], qs[0][q].Addr(), 20)
		got := receiveAll(t, qs[0], q, 20)
		for r, n := range got {
			if want := map[bool]int{true: 20}[r == q]; n != want {
				t.Errorf("frames to queue %d's port: %d arrived on queue %d, want %d", q, n, r, want)
			}
		}
		if n := counter(qs[0][(q+1)%4], "nic_queue_forwarded"); n != 0 {
			t.Errorf("queue %d forwarded %d frames: steering was not in hardware", (q+1)%4, n)
		}
	}
}

// A port steered to a queue by a NIC rule arrives there, and no longer once
// the rule is removed: then RSS places it again, where it went before.
func TestSteerRemove82599(t *testing.T) {
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing, o.TxRing = 4, 128, 128
	boards, qs := queuedBoards(t, nicpair.IXGBE(t, o))
	const port = 41000 // no queue's port: its frames count as other_dest where they land
	to, _ := transport.UDPNICID(nicpair.UDPAddr(0))
	to = to&^0xFFFF | port
	landed := func() int {
		t.Helper()
		before := make([]uint64, 4)
		for q := range 4 {
			before[q] = counter(qs[0][q], "nic_udp_other_dest")
		}
		sendN(t, qs[1][0], to, 5)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for q := range 4 {
				qs[0][q].Recv(make([]transport.Frame, 4), 0)
				if counter(qs[0][q], "nic_udp_other_dest")-before[q] == 5 {
					return q
				}
			}
		}
		t.Fatal("the frames to the unsteered port landed nowhere")
		return -1
	}
	rss := landed()
	want := (rss + 2) % 4
	st, err := boards[0].Steer(port, want)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Hardware() {
		t.Fatalf("%v: want a NIC rule on the 82599", st)
	}
	if q := landed(); q != want {
		t.Fatalf("steered to queue %d, frames landed on queue %d", want, q)
	}
	if err := st.Remove(); err != nil {
		t.Fatal(err)
	}
	if q := landed(); q != rss {
		t.Errorf("after Remove the frames landed on queue %d, want RSS's %d", q, rss)
	}
	if err := st.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// The 82574 has no rule for a UDP port (and hashes UDP by addresses only),
// so the transport steers in software: frames for either queue's port land
// on the one queue RSS picks for the pair of addresses, and that queue
// hands the other queue's frames over. Removing the steering stops the
// handing over.
func TestQueuesSteerE1000E(t *testing.T) {
	o := e1000e.DefaultOptions()
	o.Queues = 2
	_, qs := queuedBoards(t, nicpair.E1000E(t, o))
	for q := range 2 {
		sendN(t, qs[1][0], qs[0][q].Addr(), 20)
		got := receiveAll(t, qs[0], q, 20)
		if got[q] != 20 || got[1-q] != 0 {
			t.Errorf("frames to queue %d's port arrived %v per queue, want 20 on queue %d alone", q, got, q)
		}
	}
	fw := counter(qs[0][0], "nic_queue_forwarded") + counter(qs[0][1], "nic_queue_forwarded")
	if fw != 20 {
		t.Fatalf("%d frames handed over between queues, want the 20 of the queue RSS does not pick", fw)
	}
	// Close the queue the frames were handed to: its port leaves the table.
	to := 1 // queue 0 handed queue 1's frames over, or else the reverse
	if counter(qs[0][1], "nic_queue_forwarded") == 20 {
		to = 0
	}
	addr := qs[0][to].Addr()
	if err := qs[0][to].Close(); err != nil {
		t.Fatal(err)
	}
	other := qs[0][1-to]
	before := counter(other, "nic_udp_other_dest")
	sendN(t, qs[1][0], addr, 5)
	deadline := time.Now().Add(10 * time.Second)
	for counter(other, "nic_udp_other_dest")-before < 5 && time.Now().Before(deadline) {
		if n, err := other.Recv(make([]transport.Frame, 4), 0); err != nil || n != 0 {
			t.Fatalf("Recv = %d, %v: a frame for the closed queue's port was delivered", n, err)
		}
	}
	if n := counter(other, "nic_udp_other_dest") - before; n != 5 {
		t.Errorf("%d of 5 frames for the closed queue's port were dropped as not ours", n)
	}
	if n := counter(other, "nic_queue_forwarded"); n != fw {
		t.Errorf("frames still handed over after the steering was removed: %d, was %d", n, fw)
	}
}

// While queues are open the board's own Send and Recv refuse, and Ethernet
// framing has no queues to open.
func TestQueuesBoard(t *testing.T) {
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing, o.TxRing = 2, 128, 128
	ns := nicpair.IXGBE(t, o)
	boards := nicpair.Transports(t, ns, nicpair.UDP)
	defer boards[1].Close()
	b := boards[0]
	x, err := b.OpenQueue(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.OpenQueue(1); err == nil {
		t.Error("queue 1 opened twice")
	}
	if _, err := b.OpenQueue(2); !errors.Is(err, nicdrv.ErrBadQueue) {
		t.Errorf("OpenQueue(2) of 2 queues: %v, want ErrBadQueue", err)
	}
	if _, err := b.Recv(make([]transport.Frame, 1), 0); !errors.Is(err, nic.ErrQueuesOpen) {
		t.Errorf("board Recv with a queue open: %v", err)
	}
	if _, err := b.Send([]transport.Frame{{Peer: boards[1].Addr()}}); !errors.Is(err, nic.ErrQueuesOpen) {
		t.Errorf("board Send with a queue open: %v", err)
	}
	if x.Addr() != b.Addr()+1 {
		t.Errorf("queue 1's NIC id %#x, want the board's port + 1 (%#x)", uint64(x.Addr()), uint64(b.Addr()+1))
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send([]transport.Frame{{Peer: boards[1].Addr(), Data: []byte("x")}}); err != nil {
		t.Errorf("board Send after its queue closed: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	ens := nicpair.E1000E(t, e1000e.DefaultOptions())
	defer ens[1].Close()
	eth, err := nic.New(ens[0], nic.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eth.Close()
	if _, err := eth.OpenQueue(0); !errors.Is(err, nicdrv.ErrNotSupported) {
		t.Errorf("OpenQueue with Ethernet framing: %v, want ErrNotSupported", err)
	}
}

// A queue's transport is a transport: the conformance suite between queue
// 3 of one 82599 and queue 1 of the other.
func TestConformanceQueue82599(t *testing.T) {
	transporttest.RunWith(t, func(t *testing.T) (a, b transport.Transport) {
		o := ixgbe.DefaultOptions()
		o.Queues, o.RxRing, o.TxRing = 4, 128, 128
		boards := nicpair.Transports(t, nicpair.IXGBE(t, o), nicpair.UDP)
		t.Cleanup(func() {
			for _, b := range boards {
				if err := b.Close(); err != nil {
					t.Error(err)
				}
			}
		})
		x, err := boards[0].OpenQueue(3)
		if err != nil {
			t.Fatal(err)
		}
		y, err := boards[1].OpenQueue(1)
		if err != nil {
			t.Fatal(err)
		}
		return x, y
	}, transporttest.Options{InPlace: true})
}

// With Options.QueueAddrs the 82574 steers by RSS: each queue takes an
// address of the block whose datagrams the driver's destination key puts
// on that queue, whoever sends them, so frames from every queue of the
// other board arrive on the queue they are addressed to and none is handed
// over. Under Microsoft's key the sender moves datagrams between queues,
// so the transport falls back to software steering on the board's address.
func TestQueuesSteerE1000ERSS(t *testing.T) {
	block := func(i int) netip.Prefix { return netip.MustParsePrefix(fmt.Sprintf("10.0.%d.0/28", 1+i)) }
	o := e1000e.DefaultOptions()
	o.Queues = 2
	ts := nicpair.Transports(t, nicpair.E1000E(t, o), func(i int) nic.Options {
		u := nicpair.UDP(i)
		u.QueueAddrs = block(i)
		return u
	})
	var qs [2][]transport.Transport
	for i, b := range ts {
		t.Cleanup(func() { b.Close() })
		for q := range 2 {
			x, err := b.OpenQueue(q)
			if err != nil {
				t.Fatal(err)
			}
			st := x.(*nic.Transport).Steering()
			if !st.Hardware() || !block(i).Contains(st.Addr) || st.Queue != q {
				t.Fatalf("board %d queue %d: %v, want RSS on an address of %v", i, q, st, block(i))
			}
			if got := x.Addr().UDPAddr(); got.Addr() != st.Addr {
				t.Errorf("queue %d's NIC id is %v, want its address %v", q, got, st.Addr)
			}
			qs[i] = append(qs[i], x)
		}
	}
	if qs[0][0].Addr().UDPAddr().Addr() == qs[0][1].Addr().UDPAddr().Addr() {
		t.Fatal("both queues took one address")
	}
	for q := range 2 {
		for from := range 2 {
			sendN(t, qs[1][from], qs[0][q].Addr(), 10)
			got := receiveAll(t, qs[0], q, 10)
			if got[q] != 10 || got[1-q] != 0 {
				t.Errorf("frames from queue %d to queue %d's address arrived %v per queue", from, q, got)
			}
		}
	}
	for q := range 2 {
		for _, c := range []string{"nic_queue_forwarded", "nic_udp_other_dest", "nic_queue_forward_dropped"} {
			if n := counter(qs[0][q], c); n != 0 {
				t.Errorf("queue %d: %s = %d, want 0 with RSS steering", q, c, n)
			}
		}
	}

	ms := e1000e.MicrosoftRSSKey
	o.RSSKey = &ms
	b := nicpair.Transports(t, nicpair.E1000E(t, o), func(i int) nic.Options {
		u := nicpair.UDP(i)
		u.QueueAddrs = block(i)
		return u
	})
	for i := range b {
		defer b[i].Close()
	}
	x, err := b[0].OpenQueue(1)
	if err != nil {
		t.Fatal(err)
	}
	if st := x.(*nic.Transport).Steering(); st.Hardware() || st.Addr.IsValid() || x.Addr() != b[0].Addr()+1 {
		t.Errorf("under Microsoft's key: %v, NIC id %#x; want software steering on the board's address", st, uint64(x.Addr()))
	}
}
