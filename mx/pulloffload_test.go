package mx

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// pullEngine is an emulated CBDMA platform and an engine over it, checked
// for leaked DMA mappings when the test ends (after the boards closed: the
// cleanups run last-registered first, so create it before the pair).
type pullEngine struct {
	plat *emulated.CBDMA
	eng  *ioat.Engine
}

func newPullEngine(t testing.TB) *pullEngine {
	t.Helper()
	plat, err := emulated.NewCBDMA(emulated.CBDMAOptions{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	eo := ioat.DefaultEngineOptions()
	eo.CPUThreshold = -1 // every request to the engine
	eng, err := ioat.NewEngine(plat.Devices(), eo)
	if err != nil {
		plat.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
		if n := plat.IOMMU().Live(); n != 0 {
			t.Errorf("%d DMA mappings left behind", n)
		}
		plat.Close()
	})
	return &pullEngine{plat: plat, eng: eng}
}

// pullEngineOptions gives board b the engine, with thresholds low enough
// for test-sized messages.
func pullEngineOptions(pe *pullEngine) (a, b BoardOptions) {
	a = fastOptions()
	b = fastOptions()
	b.Local.Engine = pe.eng
	b.PullEngineMin = 64 << 10
	b.PullEngineFrag = 512
	return a, b
}

// heldNow is a transport's held_now counter (0 when it has none).
func heldNow(tr transport.Transport) uint64 {
	var v uint64
	if st, ok := tr.(transport.Stats); ok {
		for _, c := range st.Counters() {
			if strings.HasSuffix(c.Name, "held_now") {
				v = c.Value
			}
		}
	}
	return v
}

// sendLarge sends msg from a to b into nseg segments and checks the bytes.
func (pr *pair) sendLarge(t *testing.T, msg []byte, nseg int, match uint64) {
	t.Helper()
	buf := make([]byte, len(msg))
	r, err := pr.b.IRecv(split(buf, nseg), match, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pr.a.ISend([][]byte{msg}, pr.atob, match, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, s, 60*time.Second)
	if st := mustWait(t, r, 60*time.Second); int(st.XferLength) != len(msg) || !bytes.Equal(buf, msg) {
		t.Fatalf("%d bytes into %d segments arrived wrong (%d received)", len(msg), nseg, st.XferLength)
	}
}

// TestPullEngineWires: large messages over loopback, UDP and the NIC
// transport (emulated e1000e) arrive byte-exact with the receiver's pull
// replies copied by the engine, none by the CPU after a failure; no frame
// stays held between messages or after Close, and no DMA mapping outlives
// the engine.
func TestPullEngineWires(t *testing.T) {
	for _, tf := range transportFactories {
		switch tf.name {
		case "loopback", "udp", "nic":
		default:
			continue
		}
		t.Run(tf.name, func(t *testing.T) {
			pe := newPullEngine(t)
			oa, ob := pullEngineOptions(pe)
			pr := newPair(t, tf, oa, loopback.Faults{}, ob)
			sizes := []int{100 << 10, 1<<20 + 7, 3 << 20}
			if testing.Short() {
				sizes = sizes[:2]
			}
			for i, size := range sizes {
				msg := pattern(size, uint64(i))
				for _, nseg := range []int{1, 3} {
					pr.sendLarge(t, msg, nseg, uint64(i))
					waitCond(t, "no frame held after the message", func() bool { return heldNow(pr.w.b) == 0 })
				}
			}
			c := pr.b.Counters()
			if c.Get(RecvPullEngine) == 0 || c.Get(PullEngineFallbacks) != 0 {
				t.Fatalf("pull replies by the engine %d, fallbacks %d; want some and none", c.Get(RecvPullEngine), c.Get(PullEngineFallbacks))
			}
			t.Logf("%d of %d pull replies copied by the engine", c.Get(RecvPullEngine), c.Get(RecvPullReply))
			// Below the message threshold the CPU copies.
			before := c.Get(RecvPullEngine)
			pr.sendLarge(t, pattern(48<<10, 9), 1, 9)
			if got := pr.b.Counters().Get(RecvPullEngine); got != before {
				t.Errorf("a 48 KiB message (below PullEngineMin) had %d replies copied by the engine", got-before)
			}
			pr.ba.Close()
			pr.bb.Close()
			if n := heldNow(pr.w.b); n != 0 {
				t.Errorf("%d frames held after Close", n)
			}
		})
	}
}

// TestPullEngineFault: the engine fails a copy in the middle of a message:
// the message still arrives byte-exact (that fragment copied by the CPU
// from the still-held frame), the fallback is counted, and the next
// message goes by the engine.
func TestPullEngineFault(t *testing.T) {
	pe := newPullEngine(t)
	oa, ob := pullEngineOptions(pe)
	pr := newPair(t, transportFactories[0], oa, loopback.Faults{}, ob)
	const size = 1 << 20
	pe.plat.InjectError(0, 40, hw.ErrReadData)
	pr.sendLarge(t, pattern(size, 1), 1, 1)
	c := pr.b.Counters()
	if c.Get(PullEngineFallbacks) == 0 {
		t.Fatalf("no fallback counted after an injected engine error (engine copies %d)", c.Get(RecvPullEngine))
	}
	before := c.Get(RecvPullEngine)
	pr.sendLarge(t, pattern(size, 2), 2, 2)
	if got := pr.b.Counters().Get(RecvPullEngine); got == before {
		t.Fatal("after the fault, no pull reply went to the engine")
	}
}

// TestPullEngineLossy: a wire that loses, duplicates and reorders frames,
// with the engine on: every message arrives byte-exact (duplicates of
// frames being copied are dropped, re-requested frames copied again).
func TestPullEngineLossy(t *testing.T) {
	pe := newPullEngine(t)
	oa, ob := pullEngineOptions(pe)
	pr := newPair(t, transportFactories[0], oa, loopback.Faults{Loss: 0.02, Duplicate: 0.02, Reorder: 0.05, Seed: 3}, ob)
	n := 4
	if testing.Short() {
		n = 2
	}
	for i := range n {
		pr.sendLarge(t, pattern(512<<10+i*4099, uint64(i)), 1+i%3, uint64(i))
	}
	if c := pr.b.Counters(); c.Get(RecvPullEngine) == 0 {
		t.Fatal("no pull reply copied by the engine")
	}
}

// TestPullEngineCloseMidMessage closes the receiving board while a large
// message is being pulled: its receive completes with an error, every held
// frame is released and no DMA mapping is left (newPullEngine's cleanup).
func TestPullEngineCloseMidMessage(t *testing.T) {
	pe := newPullEngine(t)
	oa, ob := pullEngineOptions(pe)
	pr := newPair(t, transportFactories[0], oa, loopback.Faults{}, ob)
	buf := make([]byte, 8<<20)
	r, err := pr.b.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.a.ISend([][]byte{pattern(len(buf), 5)}, pr.atob, 1, nil); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "the pull has begun", func() bool { return pr.b.Counters().Get(RecvPullReply) > 0 })
	pr.bb.Close()
	if _, err := r.Wait(testCtx(t, 10*time.Second)); err == nil {
		// The message may have finished first; then it must be whole.
		if !bytes.Equal(buf, pattern(len(buf), 5)) {
			t.Fatal("receive completed without error but with wrong bytes")
		}
	}
	if n := heldNow(pr.w.b); n != 0 {
		t.Errorf("%d frames held after Close", n)
	}
}

// TestPullEngineOptions: the thresholds' environment variables set them,
// bad values are refused with the fix.
func TestPullEngineOptions(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	defer w.close()
	t.Setenv("GOMX_PULL_ENGINE_MIN", "123456")
	t.Setenv("GOMX_PULL_ENGINE_FRAG", "")
	b, err := NewBoard(w.a, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if o := b.Options(); o.PullEngineMin != 123456 || o.PullEngineFrag != DefaultPullEngineFrag {
		t.Errorf("thresholds %d, %d; want 123456 and the default %d", o.PullEngineMin, o.PullEngineFrag, DefaultPullEngineFrag)
	}
	b.Close()
	t.Setenv("GOMX_PULL_ENGINE_FRAG", "big")
	if _, err := NewBoard(w.b, fastOptions()); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "GOMX_PULL_ENGINE_FRAG") {
		t.Errorf("GOMX_PULL_ENGINE_FRAG=big: %v, want ErrBadOptions naming it", err)
	}
	t.Setenv("GOMX_PULL_ENGINE_FRAG", "")
	t.Setenv("GOMX_PULL_ENGINE_MIN", "")
	o := fastOptions()
	o.PullEngineMin = -1
	if b, err := NewBoard(w.b, o); !errors.Is(err, ErrBadOptions) {
		t.Errorf("negative PullEngineMin: %v, want ErrBadOptions", err)
		if b != nil {
			b.Close()
		}
	}
}
