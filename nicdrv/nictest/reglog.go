package nictest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/pci"
)

// RegLog is a pci.Device whose BAR register accesses, once Start is
// called, are logged in order as the NIC sees them ("write EICR = 0x28",
// "read STATUS"), registers named by Name: what a driver's register
// sequence does, values and order, where a model's access counts give only
// how many of each.
type RegLog struct {
	pci.Device
	// Name names the register at an offset.
	Name func(off int) string

	mu  sync.Mutex
	on  bool
	log []string
}

type regLogRegs struct {
	pci.Registers
	l *RegLog
}

// BAR returns the device's BAR i with its accesses logged.
func (l *RegLog) BAR(i int) (pci.Registers, error) {
	regs, err := l.Device.BAR(i)
	if err != nil {
		return nil, err
	}
	return regLogRegs{Registers: regs, l: l}, nil
}

// Start empties the log and begins logging.
func (l *RegLog) Start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on, l.log = true, nil
}

// Accesses returns the accesses logged since Start.
func (l *RegLog) Accesses() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}

// WaitRxAccesses logs what a WaitRx on queues of n, a NIC opened on l,
// does to the registers before it sleeps: it empties the log, starts the
// wait (no frame may come), waits until the access last (as Accesses words
// it) is logged, 20 s at most, cancels the wait and returns the log.
func (l *RegLog) WaitRxAccesses(t testing.TB, n nicdrv.NIC, last string, queues ...int) []string {
	t.Helper()
	l.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := n.WaitRx(ctx, queues...)
		done <- err
	}()
	for !slices.Contains(l.Accesses(), last) && ctx.Err() == nil {
		runtime.Gosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRx on queues %v, cancelled: %v", queues, err)
	}
	got := l.Accesses()
	if !slices.Contains(got, last) {
		t.Fatalf("WaitRx on queues %v made no %q in 20 s; register accesses: %q", queues, last, got)
	}
	return got
}

func (l *RegLog) add(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.log = append(l.log, fmt.Sprintf(format, a...))
	}
}

func (g regLogRegs) Read32(off int) uint32 {
	g.l.add("read %s", g.l.Name(off))
	return g.Registers.Read32(off)
}

func (g regLogRegs) Read64(off int) uint64 {
	g.l.add("read64 %s", g.l.Name(off))
	return g.Registers.Read64(off)
}

func (g regLogRegs) Write32(off int, v uint32) {
	g.l.add("write %s = %#x", g.l.Name(off), v)
	g.Registers.Write32(off, v)
}

func (g regLogRegs) Write64(off int, v uint64) {
	g.l.add("write64 %s = %#x", g.l.Name(off), v)
	g.Registers.Write64(off, v)
}
