package mx

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/cpuclock"
	"github.com/gomx-dev/gomx/transport"
)

// maxCPU bounds the CPU numbers ProgressCPUs may name: the kernel's
// affinity mask as golang.org/x/sys/unix.CPUSet holds it.
const maxCPU = 1024

// startProgress starts the progress goroutine: on a thread of its own when
// the options ask (ProgressThread), bound to ProgressCPUs when they are
// set. It returns once the goroutine has its thread and CPUs, or the
// kernel's refusal; the goroutine runs the board either way, so a refused
// board is closed like any other.
func (b *Board) startProgress() error {
	if !b.opts.ProgressThread && len(b.opts.ProgressCPUs) == 0 {
		go b.progress()
		return nil
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and the
		// affinity set on it with the thread.
		runtime.LockOSThread()
		b.progressTID.Store(int32(unix.Gettid()))
		defer b.progressTID.Store(0) // the thread's id may be reused once it ends
		errc <- b.bindCPUs()
		b.progress()
	}()
	return <-errc
}

// ProgressCPU is the CPU time the board's progress thread has used, the
// Go runtime's work on it included (its hand-offs of the processor, its
// parking), by the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID read from
// another thread: clock_getcpuclockid's clock for the thread's id); 0 when
// the progress goroutine is not locked to a thread (ProgressThread) or its
// thread has ended. A benchmark reads it to tell the board's own work from
// whatever else shares the host (mxbench overlap's own_availability).
func (b *Board) ProgressCPU() time.Duration {
	tid := b.progressTID.Load()
	if tid == 0 {
		return 0
	}
	return cpuclock.OfThread(tid)
}

// bindCPUs binds the calling thread to the options' ProgressCPUs.
func (b *Board) bindCPUs() error {
	if len(b.opts.ProgressCPUs) == 0 {
		return nil
	}
	var set unix.CPUSet
	for _, c := range b.opts.ProgressCPUs {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("%w: bind the progress thread to CPUs %v: sched_setaffinity: %v (are they online and allowed to this process? see taskset -p)", ErrBadOptions, b.opts.ProgressCPUs, err)
	}
	cpus := slices.Clone(b.opts.ProgressCPUs)
	slices.Sort(cpus)
	b.cpus = slices.Compact(cpus)
	return nil
}

// ProgressCPUs returns the CPUs the board's progress goroutine is bound
// to (BoardOptions.ProgressCPUs), the ones that receive, match and complete
// for its endpoints; nil when it is not bound.
func (b *Board) ProgressCPUs() []int { return slices.Clone(b.cpus) }

// CPUs returns the CPUs that serve the endpoint: its board's progress
// goroutine's when that is bound (Board.ProgressCPUs); else, over a
// transport that names the CPU servicing its receive queue's interrupt
// (transport.IRQCPU: an AF_XDP queue of a NIC), that CPU, where the
// kernel receives the endpoint's frames; nil when neither is known. The
// IRQ CPU is read from /proc at every call, so that it follows the kernel
// (irqbalance moves vectors): CPUs is for setting up, not the fast path.
// An application that runs the endpoint's goroutine there (BindThread)
// keeps the endpoint's state on one core.
func (e *Endpoint) CPUs() []int {
	if cpus := e.b.ProgressCPUs(); cpus != nil {
		return cpus
	}
	if q, ok := e.b.tr.(transport.IRQCPU); ok {
		if c := q.IRQCPU(); c >= 0 {
			return []int{c}
		}
	}
	return nil
}

// BindThread locks the calling goroutine to its OS thread and binds that
// thread to cpus (sched_setaffinity), for an application that places its
// goroutine on the CPU serving its endpoint (Endpoint.CPUs). The goroutine
// stays locked; call runtime.UnlockOSThread to let it move again, and
// bind it back to every CPU first if it should run anywhere.
func BindThread(cpus []int) error {
	if len(cpus) == 0 {
		return fmt.Errorf("%w: BindThread with no CPU", ErrBadOptions)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= maxCPU {
			return fmt.Errorf("%w: CPU %d: want 0..%d", ErrBadOptions, c, maxCPU-1)
		}
		set.Set(c)
	}
	runtime.LockOSThread()
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("bind the thread to CPUs %v: sched_setaffinity: %w", cpus, err)
	}
	return nil
}
