package mx

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/vfio"
)

// TestQueuedRSSVFIO is TestQueuedRSS over real (or QEMU's) 82574Ls through
// VFIO: `make qemu-test` runs it in its guests, so the steering is checked
// against the RSS QEMU's model carries out. It skips without two such NICs
// bound to vfio-pci, and fails instead where GOMX_REQUIRE_QEMU names
// e1000e.
func TestQueuedRSSVFIO(t *testing.T) {
	v := nictest.OpenVFIO(t, nictest.VFIOWant{Driver: "e1000e", DevicesEnv: "GOMX_E1000E_DEVICES", Count: 2,
		Match: func(f vfio.Function) bool { return hw.Is82574(f.Vendor, f.Device) }})
	queuedRSS(t, [2]pci.Device{v.Devices[0], v.Devices[1]}, 8)
}

// TestQueuedRSS: mx endpoints on a queued board over two-queue 82574s (the
// emulated pair here) are steered by RSS: each queue has its own address,
// chosen so that the driver's key puts every datagram to it on that
// queue, and each endpoint's frames are received from its own queue's ring
// by its own queue's board (whose progress goroutine alone receives from
// that queue's transport), none handed over between queues, while every
// endpoint exchanges messages byte-exact with both endpoints of the
// other board.
func TestQueuedRSS(t *testing.T) {
	p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := range 2 {
			if s := p.Stats(i); s.Violations != 0 {
				t.Errorf("model NIC %d: %d violations, the last: %s", i, s.Violations, s.LastViolation)
			}
		}
		if live := p.IOMMU().Live(); live != 0 {
			t.Errorf("%d DMA mappings left after the boards closed", live)
		}
		p.Close()
	})
	f := p.Functions()
	queuedRSS(t, [2]pci.Device{f[0], f[1]}, 50)
}

// queuedRSS runs the test over two cabled 82574s; rounds is how many times
// each endpoint sends each size to each remote endpoint.
func queuedRSS(t *testing.T, devs [2]pci.Device, rounds int) {
	var qbs [2]*QueuedBoard
	for i := range 2 {
		o := e1000e.DefaultOptions()
		o.Queues = 2
		n, err := e1000e.Open(devs[i], o)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := nic.New(n, nic.Options{Framing: nic.FramingUDP,
			UDP:        netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i)}), 40000),
			QueueAddrs: netip.MustParsePrefix(fmt.Sprintf("10.0.%d.0/28", 1+i))})
		if err != nil {
			n.Close()
			t.Fatal(err)
		}
		bo := overNIC
		bo.ResendDelay = 200 * time.Millisecond
		qb, err := NewQueuedBoard(tr, QueuedOptions{Board: bo})
		if err != nil {
			tr.Close()
			t.Fatal(err)
		}
		defer func() {
			if err := qb.Close(); err != nil {
				t.Error(err)
			}
		}()
		qbs[i] = qb
	}
	// One endpoint per queue; each queue's transport is steered by RSS on
	// an address of its own.
	var eps [2][2]*Endpoint
	for i := range 2 {
		for k := range 2 {
			e, err := qbs[i].OpenEndpoint(AnyEndpoint, testKey)
			if err != nil {
				t.Fatal(err)
			}
			eps[i][k] = e
		}
		for q, b := range qbs[i].Boards() {
			st := b.tr.(*nic.Transport).Steering()
			if st == nil || !st.Hardware() || !st.Addr.IsValid() || st.Queue != q {
				t.Fatalf("board %d queue %d: steering %v, want RSS on an address of its own", i, q, st)
			}
			if eps[i][q].Board() != b || eps[i][q].Addr().NIC != b.NICID() {
				t.Fatalf("board %d: endpoint %d is not on queue %d's board", i, q, q)
			}
		}
	}
	// Counters before: the boards exchanged discovery frames already.
	delivered := func(i, q int) uint64 { return counterOf(qbs[i].Boards()[q], "nic_queue_delivered") }
	var before [2][2]uint64
	for i := range 2 {
		for q := range 2 {
			before[i][q] = delivered(i, q)
		}
	}
	ctx := testCtx(t, 2*time.Minute)
	sizes := []int{0, 8, 64, 1000, 1472, 4000, 20000}
	sent := [2][2]int{} // messages received by endpoint [i][q]
	for from := range 2 {
		for q := range 2 {
			for to := range 2 {
				a, b := eps[from][q], eps[1-from][to]
				dst, err := a.Connect(ctx, b.Addr().NIC, b.ID(), testKey)
				if err != nil {
					t.Fatal(err)
				}
				for r := range rounds {
					for k, size := range sizes {
						seed := uint64(from<<20 | q<<18 | to<<16 | r<<8 | k)
						msg := pattern(size, seed)
						got := make([]byte, size)
						exchange(t, ctx, a, dst, b, seed, ^uint64(0), [][]byte{msg}, [][]byte{got})
						if !bytes.Equal(got, msg) {
							t.Fatalf("board %d queue %d to board %d queue %d, %d bytes: corrupted", from, q, 1-from, to, size)
						}
						sent[1-from][to]++
					}
				}
			}
		}
	}
	for i := range 2 {
		for q, b := range qbs[i].Boards() {
			got := delivered(i, q) - before[i][q]
			t.Logf("board %d queue %d (%v): %d frames received from its own ring for %d messages to its endpoint",
				i, q, b.NICID().UDPAddr(), got, sent[i][q])
			if got < uint64(sent[i][q]) {
				t.Errorf("board %d queue %d received %d frames, fewer than the %d messages to its endpoint", i, q, got, sent[i][q])
			}
			for _, c := range []string{"nic_queue_forwarded", "nic_queue_forward_dropped", "nic_udp_other_dest"} {
				if n := counterOf(b, c); n != 0 {
					t.Errorf("board %d queue %d: %s = %d; with RSS steering every frame arrives on its own queue", i, q, c, n)
				}
			}
		}
	}
}

// counterOf reads one of a board's transport counters.
func counterOf(b *Board, name string) uint64 {
	for _, c := range b.TransportCounters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}
