package ioat

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// syncBuffer is a bytes.Buffer a logger may write from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSlowToClearErrors: on a part whose CHANERR bits keep reading set
// for a while after they are cleared (or for ever), a DMA error fails
// its request only; the channel is reset and restarted and carries on,
// and it opens again afterwards, in this process and the next. The bits
// that would not clear are logged once and reported in Info.
func TestSlowToClearErrors(t *testing.T) {
	for _, reads := range []int{-1, 5} {
		t.Run(map[int]string{-1: "never", 5: "after-5-reads"}[reads], func(t *testing.T) {
			devs, plat := emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver33, SlowClear: hw.ErrReadData, SlowClearReads: reads}).open(t, 1)
			dev := devs[0]
			var log syncBuffer
			o := Options{RingSize: 64, Logger: slog.New(slog.NewTextHandler(&log, nil))}
			c, err := Open(dev, o)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 3*4096)
			for i := range 4096 {
				buf[i] = byte(i*7 + 1)
			}
			m, err := dev.DMA().Map(buf)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.DMA().Unmap(m)
			plat.cb.InjectError(0, 0, hw.ErrReadData)
			for i := 0; i < 2; i++ {
				if err := c.EnqueueCopy(m, 4096*(i+1), m, 0, 4096, uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			c.Submit()
			r := drain(t, c, 2)
			if !errors.Is(r[0].Err, ErrDMAFault) {
				t.Fatalf("request with the injected read error: %v, want ErrDMAFault", r[0].Err)
			}
			if r[1].Err != nil {
				t.Fatalf("request behind the failed one, after the channel's reset: %v", r[1].Err)
			}
			if !bytes.Equal(buf[8192:], buf[:4096]) {
				t.Fatal("the request behind the failed one copied wrong bytes")
			}
			if err := c.EnqueueCopy(m, 4096, m, 0, 4096, 9); err != nil {
				t.Fatal(err)
			}
			c.Submit()
			if r := drain(t, c, 1); r[0].Err != nil {
				t.Fatalf("copy after the recovery: %v", r[0].Err)
			}
			if got := c.Info().StickyChanErr; got != hw.ErrReadData {
				t.Errorf("Info.StickyChanErr = %s, want %s", hw.ErrString(got), hw.ErrString(hw.ErrReadData))
			}
			if n := strings.Count(log.String(), "still read set"); n != 1 {
				t.Errorf("%d log lines about bits that would not clear, want 1:\n%s", n, log.String())
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			// A later owner (another process, or this one again) opens it.
			c, err = Open(dev, o)
			if err != nil {
				t.Fatalf("reopen with CHANERR slow to clear: %v", err)
			}
			if err := c.EnqueueCopy(m, 4096, m, 0, 4096, 1); err != nil {
				t.Fatal(err)
			}
			c.Submit()
			if r := drain(t, c, 1); r[0].Err != nil {
				t.Fatalf("copy after reopening: %v", r[0].Err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// chainFault makes every CHAINADDR write land misaligned, so the model
// refuses the chain address as hardware would a bad one.
type chainFault struct {
	pci.Device
}

func (d chainFault) BAR(i int) (pci.Registers, error) {
	r, err := d.Device.BAR(i)
	return chainFaultRegs{r}, err
}

type chainFaultRegs struct{ pci.Registers }

func (r chainFaultRegs) Write64(off int, v uint64) {
	if off == hw.ChannelBase(0)+hw.ChanChainAddr {
		v |= 8
	}
	r.Registers.Write64(off, v)
}

// TestChainAddrRefused: CHANERR bits raised by programming the channel
// refuse it, with an error that says so (not a timeout), even when other
// bits read set before and are ignored.
func TestChainAddrRefused(t *testing.T) {
	devs, plat := emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver33, SlowClear: hw.ErrWriteData, SlowClearReads: -1}).open(t, 1)
	dev := devs[0]
	// Leave a slow-to-clear bit behind: a failed copy, then close.
	c, err := Open(dev, Options{RingSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	m, err := dev.DMA().Map(buf)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.DMA().Unmap(m)
	plat.cb.InjectError(0, 0, hw.ErrWriteData)
	if err := c.EnqueueCopy(m, 0, m, 2048, 2048, 0); err != nil {
		t.Fatal(err)
	}
	c.Submit()
	drain(t, c, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	_, err = Open(chainFault{dev}, Options{RingSize: 64})
	switch {
	case err == nil:
		t.Fatal("a channel that refused its chain address opened")
	case errors.Is(err, ErrTimeout):
		t.Fatalf("refused chain address reported as a timeout: %v", err)
	case !errors.Is(err, ErrDescriptor) || !strings.Contains(err.Error(), "raised CHANERR "+hw.ErrString(hw.ErrChainAddr)) ||
		!strings.Contains(err.Error(), hw.ErrString(hw.ErrWriteData)+" read set before"):
		t.Fatalf("open with a refused chain address: %v, want ErrDescriptor naming the raised bit", err)
	}
	// The next open, without the fault, succeeds.
	c, err = Open(dev, Options{RingSize: 64})
	if err != nil {
		t.Fatalf("open after the refusal: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
