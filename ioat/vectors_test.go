package ioat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat/hw"
)

// TestVectorPerChannel: a function with four channels opens every one of
// them with interrupts, each on its own MSI-X vector, and a copy on each
// channel wakes that channel's waiter; closing one channel leaves the
// others' interrupts working (on 3.3, 0x6F50, whose channel reset wipes
// the MSI-X table, the driver rewires it for them). That a channel
// signals no other's vector is the model's TestVectorPerChannel: here
// the start-up null descriptors' interrupts land at times the test does
// not control.
func TestVectorPerChannel(t *testing.T) {
	for _, ver := range []uint8{hw.Ver32, hw.Ver33} {
		t.Run(fmt.Sprintf("v%x", ver), func(t *testing.T) {
			devs, _ := emulatedBackend(emulated.CBDMAOptions{Version: ver, ChannelsPerFunction: 4}).open(t, 1)
			dev := devs[0]
			chans := make([]*Channel, 4)
			for i := range chans {
				c, err := Open(dev, Options{RingSize: 64, Index: i, Interrupts: true})
				if err != nil {
					t.Fatalf("open channel %d of 4 with interrupts: %v", i, err)
				}
				defer c.Close()
				chans[i] = c
			}
			for i, c := range chans {
				for j := range i {
					if c.Interrupt() == chans[j].Interrupt() {
						t.Fatalf("channels %d and %d share an interrupt", j, i)
					}
				}
			}
			buf := make([]byte, 2*4096)
			for i := range 4096 {
				buf[i] = byte(i * 5)
			}
			m, err := dev.DMA().Map(buf)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.DMA().Unmap(m)
			copyWakes := func(i int) {
				t.Helper()
				c := chans[i]
				clear(buf[4096:])
				before := c.Stats().Interrupts
				if err := c.EnqueueCopy(m, 4096, m, 0, 4096, uint64(i)); err != nil {
					t.Fatal(err)
				}
				c.Submit()
				for deadline := time.Now().Add(5 * time.Second); c.Stats().Interrupts == before; {
					if time.Now().After(deadline) {
						t.Fatalf("channel %d's copy never woke its waiter", i)
					}
					if err := c.WaitInterrupt(context.Background(), 100*time.Millisecond); err != nil {
						t.Fatal(err)
					}
				}
				if r := drain(t, c, 1); r[0].Err != nil {
					t.Fatalf("channel %d: %v", i, r[0].Err)
				}
				if !bytes.Equal(buf[4096:], buf[:4096]) {
					t.Fatalf("channel %d copied wrong bytes", i)
				}
			}
			for i := range chans {
				copyWakes(i)
			}
			if err := chans[0].Close(); err != nil {
				t.Fatal(err)
			}
			chans[0] = nil
			for i := 1; i < 4; i++ {
				copyWakes(i)
			}
		})
	}
}

// TestEngineVectorPerChannel: an engine over a four-channel function
// opens every channel with interrupts, each on its own vector, and copies
// from many goroutines on all of them. (Which waits sleep rather than
// spin depends on timing; TestVectorPerChannel shows a channel's
// completion waking its own waiter.)
func TestEngineVectorPerChannel(t *testing.T) {
	devs, plat := emulatedBackend(emulated.CBDMAOptions{ChannelsPerFunction: 4, Bandwidth: 256 << 20}).open(t, 1)
	o := offloadAll()
	o.Channel.Interrupts = true
	o.Channel.RingSize = 64
	e, err := NewEngine(devs, o)
	if err != nil {
		t.Fatalf("engine over a 4-channel function with interrupts: %v", err)
	}
	defer e.Close()
	cs := e.Channels()
	if len(cs) != 4 {
		t.Fatalf("%d channels, want 4", len(cs))
	}
	for i, c := range cs {
		if !c.Info().Interrupts || c.Interrupt() == nil {
			t.Fatalf("channel %d opened without its interrupt", i)
		}
		for j := range i {
			if c.Interrupt() == cs[j].Interrupt() {
				t.Fatalf("channels %d and %d share an interrupt", j, i)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, dst := make([]byte, 256<<10), make([]byte, 256<<10)
			for i := range src {
				src[i] = byte(i + g)
			}
			for range 4 {
				if err := e.Copy(dst, src); err != nil {
					errs <- err
					return
				}
			}
			if !bytes.Equal(dst, src) {
				errs <- fmt.Errorf("goroutine %d: copy differs", g)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for ch := range 4 {
		if plat.Stats(ch).Bytes == 0 {
			t.Errorf("channel %d copied nothing", ch)
		}
	}
}

// TestEngineChannelMask: ChannelMask opens only the channels it names,
// so a tool can run one engine per channel of a function; a mask naming
// none of them is refused.
func TestEngineChannelMask(t *testing.T) {
	devs, plat := emulatedBackend(emulated.CBDMAOptions{ChannelsPerFunction: 3}).open(t, 1)
	o := offloadAll()
	o.ChannelMask = 1 << 1
	e, err := NewEngine(devs, o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if cs := e.Channels(); len(cs) != 1 || cs[0].Info().Index != 1 {
		t.Fatalf("mask 0b10 opened %d channels (first index %d), want channel 1 only", len(cs), cs[0].Info().Index)
	}
	src, dst := make([]byte, 64<<10), make([]byte, 64<<10)
	for i := range src {
		src[i] = byte(i)
	}
	if err := e.Copy(dst, src); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("copy: %v", err)
	}
	if plat.Stats(0).Bytes != 0 || plat.Stats(1).Bytes == 0 || plat.Stats(2).Bytes != 0 {
		t.Errorf("bytes per channel %d %d %d, want channel 1's only", plat.Stats(0).Bytes, plat.Stats(1).Bytes, plat.Stats(2).Bytes)
	}
	o.ChannelMask = 1 << 5
	if _, err := NewEngine(devs, o); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("mask naming no channel: %v, want ErrBadRequest", err)
	}
}

// TestVectorTakeOver: a channel opened again with TakeOver while a
// Channel of this process still holds it takes its vector over too.
func TestVectorTakeOver(t *testing.T) {
	devs, _ := emulatedBackend(emulated.CBDMAOptions{Version: hw.Ver32, ChannelsPerFunction: 2}).open(t, 1)
	old, err := Open(devs[0], Options{RingSize: 64, Index: 1, Interrupts: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(devs[0], Options{RingSize: 64, Index: 1, Interrupts: true, TakeOver: true})
	if err != nil {
		t.Fatalf("take over a channel with its vector: %v", err)
	}
	if c.Interrupt() == nil || old.Interrupt() != nil || !c.Info().WasInUse {
		t.Fatalf("after the take-over: new interrupt %v, old %v, WasInUse %v", c.Interrupt(), old.Interrupt(), c.Info().WasInUse)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
