package mx

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
)

// BenchmarkQueuedRate is the aggregate message rate of N endpoint pairs
// (N = 1, 2, 4, 8), each driven by its own goroutine, over two emulated
// 82599s, in three placements: N queues whose ports the NIC steers to
// them, one progress thread per queue ("steered"); the same with each
// queue's thread bound to a CPU and each pair's goroutine bound to its
// endpoints' CPU, as Open-MX binds a process to its queue's core
// ("steered-bound"); and the same N pairs on one queue, one progress
// thread and one board lock for all ("one-queue"). In these the progress
// threads poll their rings (the driver's polling WaitRx); "steered-irq"
// and "one-queue-irq" are the steered and one-queue placements with every
// progress thread asleep on its queue's MSI-X vector once its ring is
// empty, the vector unmoderated (ixgbe.Options.NoModeration) so that the
// frame itself wakes it. Each goroutine posts
// windows of 32 64-byte messages and their receives and waits for them;
// b.N messages in all, spread evenly over the pairs, so give enough
// (-benchtime=50000x) for a figure that is not set-up noise. The NICs
// have rings of 1024 descriptors, so a receiving thread the machine
// descheduled does not lose frames; "resends" reports the frames sent
// again all the same, since a resend timer's wait dwarfs a run.
//
// Each configuration reports msgs/s (messages over wall time) and
// cpu-us/msg (the process's user and system CPU time over the messages:
// boards, progress threads, driver and the model NICs, which run on the
// same cores, so the figure is the machine's, not a NIC's). The wall
// figure swings with the machine's load; CPU time per message much less.
// Two more say how much of the machine the run got: cpus, the process's
// CPU time over the wall time (the CPUs it used on average), and
// runq-threads, the time its threads waited on a run queue, runnable but
// given no CPU, over the wall time (how many waited on average: the
// kernel's schedstat). A run short of CPUs with runq-threads near zero
// was held back by the process itself (threads blocked on each other);
// with runq-threads near one or more, by a machine whose CPUs were busy.
// At the end the benchmark logs, for its last run of each configuration,
// the rate of N pairs over one pair's in the same placement, and of
// steered queues over one queue that waits the same way: ratios taken
// within one run.
func BenchmarkQueuedRate(b *testing.B) {
	type key struct {
		n     int
		place string
	}
	results := map[key]queuedRate{}
	places := []string{"steered", "steered-bound", "one-queue", "steered-irq", "one-queue-irq"}
	for _, n := range []int{1, 2, 4, 8} {
		for _, place := range places {
			b.Run(fmt.Sprintf("endpoints=%d/%s", n, place), func(b *testing.B) {
				queues := n
				if strings.HasPrefix(place, "one-queue") {
					queues = 1
				}
				r := runQueuedRate(b, n, queues, place == "steered-bound", strings.HasSuffix(place, "-irq"), b.N)
				b.ReportMetric(r.perSecond(), "msgs/s")
				b.ReportMetric(r.cpuPerMsg(), "cpu-us/msg")
				b.ReportMetric(r.threadsPerMsg(), "queue-cpu-us/msg")
				b.ReportMetric(r.cpus(), "cpus")
				b.ReportMetric(r.runqThreads(), "runq-threads")
				b.ReportMetric(float64(r.resends), "resends")
				if r.wakes.waits > 0 {
					// The progress threads' waits that a timeout, not a
					// frame, ended (finetimer.go).
					b.ReportMetric(float64(r.wakes.empty)/float64(r.wakes.waits), "empty-sleeps/wait")
				}
				r.wakes.report(b, r.msgs)
				results[key{n, place}] = r
			})
		}
	}
	if len(results) == 0 {
		return
	}
	var s strings.Builder
	fmt.Fprintf(&s, "aggregate rate, msgs/s (cpu-us/msg); x1: over one pair in the same placement; /1q: over one queue\n")
	fmt.Fprintf(&s, "%3s", "N")
	for _, p := range places {
		fmt.Fprintf(&s, " | %-36s", p)
	}
	s.WriteString("\n")
	for _, n := range []int{1, 2, 4, 8} {
		fmt.Fprintf(&s, "%3d", n)
		for _, p := range places {
			r, ok := results[key{n, p}]
			if !ok {
				fmt.Fprintf(&s, " | %-36s", "-")
				continue
			}
			cell := fmt.Sprintf("%.0f (%.1f)", r.perSecond(), r.cpuPerMsg())
			if one, ok := results[key{1, p}]; ok && n > 1 {
				cell += fmt.Sprintf(" x1 %.2f", r.perSecond()/one.perSecond())
			}
			oneQueue := "one-queue"
			if strings.HasSuffix(p, "-irq") {
				oneQueue += "-irq"
			}
			if q1, ok := results[key{n, oneQueue}]; ok && p != oneQueue {
				cell += fmt.Sprintf(" /1q %.2f", r.perSecond()/q1.perSecond())
			}
			fmt.Fprintf(&s, " | %-36s", cell)
		}
		s.WriteString("\n")
	}
	b.Log("\n" + s.String())
}

// queuedRate is one measurement: messages, wall time and the process's
// CPU time.
type queuedRate struct {
	msgs      int
	wall, cpu time.Duration
	// runq is how long the process's threads waited on a run queue,
	// runnable but given no CPU, all of them added up (procSched).
	runq time.Duration
	// threads is the CPU time of both sides' progress threads (a queue
	// each), by their thread CPU clocks: what the queues cost of their
	// own, apart from the application goroutines that serve them.
	threads time.Duration
	// resends counts frames sent again (fast, by timer, tail probes):
	// a run that lost frames waited for recovery too.
	resends uint64
	// wakes: what woke the boards of both sides (bench_test.go).
	wakes boardWakes
}

func (r queuedRate) perSecond() float64 { return float64(r.msgs) / r.wall.Seconds() }
func (r queuedRate) cpuPerMsg() float64 {
	return float64(r.cpu.Microseconds()) / float64(max(r.msgs, 1))
}
func (r queuedRate) threadsPerMsg() float64 {
	return float64(r.threads.Microseconds()) / float64(max(r.msgs, 1))
}

// cpus is the CPUs the run used on average: CPU time over wall time.
func (r queuedRate) cpus() float64 { return r.cpu.Seconds() / r.wall.Seconds() }

// runqThreads is how many of the process's threads waited for a CPU on
// average during the run.
func (r queuedRate) runqThreads() float64 { return r.runq.Seconds() / r.wall.Seconds() }

// procSched reads, for every thread of the process, how long it waited on
// a run queue so far (the second field of /proc/self/task/TID/schedstat,
// in ns), by thread id. A thread that exits between two readings drops
// out; runqSince counts one that appeared from zero.
func procSched(tb testing.TB) map[int]int64 {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		tb.Fatalf("threads' scheduler statistics: %v (needs Linux's /proc)", err)
	}
	m := make(map[int]int64, len(tasks))
	for _, d := range tasks {
		tid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc/self/task", d.Name(), "schedstat"))
		if err != nil {
			continue // exited since the listing
		}
		wait, err := parseSchedstat(string(b))
		if err != nil {
			tb.Fatalf("thread %d: %v", tid, err)
		}
		m[tid] = wait
	}
	return m
}

// parseSchedstat returns the run-queue wait (ns) of a schedstat line:
// "time on CPU, time waiting on a run queue, time slices".
func parseSchedstat(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat %q: want three fields (kernel built without CONFIG_SCHEDSTATS?)", s)
	}
	w, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat %q: run-queue wait: %w", s, err)
	}
	return w, nil
}

// runqSince is how long the process's threads waited on a run queue
// since before (procSched), all of them added up.
func runqSince(tb testing.TB, before map[int]int64) time.Duration {
	var sum int64
	for tid, w := range procSched(tb) {
		sum += w - before[tid]
	}
	return time.Duration(sum)
}

// threadsCPU adds up the CPU time of the boards' progress threads.
func threadsCPU(bds []*Board) time.Duration {
	var sum time.Duration
	for _, bd := range bds {
		sum += bd.ProgressCPU()
	}
	return sum
}

// processCPU is the process's user and system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runQueuedRate sends msgs 64-byte messages over n endpoint pairs on two
// queued boards of queues queues over emulated 82599s, each pair driven
// by its own goroutine; with bind, each queue's progress thread is bound
// to a CPU and each goroutine to its source endpoint's; with irq, the
// NICs are opened with unmoderated interrupts, so a progress thread whose
// ring is empty sleeps on its queue's vector until a frame raises it
// (else it polls). The timer runs only while the messages move.
func runQueuedRate(b *testing.B, n, queues int, bind, irq bool, msgs int) queuedRate {
	b.StopTimer()
	// Deep rings: a receiving thread descheduled for a while on a
	// loaded machine must not cost frames (and a resend timer's wait).
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing, o.TxRing = queues, 1024, 1024
	o.Interrupts, o.NoModeration = irq, irq
	ts, _ := queuedNICsWith(b, o, emulated.CableOptions{})
	qo := QueuedOptions{Board: overNIC}
	if bind {
		qo.CPUs = allowedCPUs(b)
	}
	var qbs [2]*QueuedBoard
	for i := range 2 {
		qb, err := NewQueuedBoard(ts[i], qo)
		if err != nil {
			b.Fatal(err)
		}
		defer qb.Close()
		qbs[i] = qb
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src, dst := make([]*Endpoint, n), make([]*Endpoint, n)
	to := make([]Addr, n)
	for k := range n {
		var err error
		if src[k], err = qbs[0].OpenEndpoint(AnyEndpoint, testKey); err != nil {
			b.Fatal(err)
		}
		if dst[k], err = qbs[1].OpenEndpoint(AnyEndpoint, testKey); err != nil {
			b.Fatal(err)
		}
		if to[k], err = src[k].Connect(ctx, dst[k].Addr().NIC, dst[k].ID(), testKey); err != nil {
			b.Fatal(err)
		}
	}
	const window = 32
	per := (msgs + n - 1) / n
	var wg, ready sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for k := range n {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			if bind {
				// The thread stays bound: it retires with the goroutine.
				if err := BindThread(src[k].CPUs()); err != nil {
					ready.Done()
					errs <- err
					return
				}
			}
			msg := make([]byte, 64)
			bufs := make([][]byte, window)
			for i := range bufs {
				bufs[i] = make([]byte, 64)
			}
			sends, recvs := make([]*Request, window), make([]*Request, window)
			ready.Done()
			<-start
			for done := 0; done < per; {
				w := min(window, per-done)
				for i := range w {
					r, err := dst[k].IRecv([][]byte{bufs[i]}, uint64(done+i), ^uint64(0), nil)
					if err != nil {
						errs <- err
						return
					}
					recvs[i] = r
				}
				for i := range w {
					s, err := src[k].ISend([][]byte{msg}, to[k], uint64(done+i), nil)
					if err != nil {
						errs <- err
						return
					}
					sends[i] = s
				}
				for i := range w {
					if _, err := sends[i].Wait(ctx); err != nil {
						errs <- err
						return
					}
					if _, err := recvs[i].Wait(ctx); err != nil {
						errs <- err
						return
					}
				}
				done += w
			}
		}()
	}
	ready.Wait()
	b.ReportAllocs()
	b.ResetTimer()
	b.StartTimer()
	resends := func() uint64 {
		var sum uint64
		for _, e := range append(slices.Clone(src), dst...) {
			c := e.Counters()
			sum += c.Get(FastRetransmits) + c.Get(TimerRetransmits) + c.Get(TailProbes)
		}
		return sum
	}
	res0 := resends()
	boards := append(qbs[0].Boards(), qbs[1].Boards()...)
	w0 := takeWakes(boards...)
	rq0 := procSched(b)
	th0, cpu0, t0 := threadsCPU(boards), processCPU(b), time.Now()
	close(start)
	wg.Wait()
	r := queuedRate{msgs: per * n, wall: time.Since(t0), cpu: processCPU(b) - cpu0, resends: resends() - res0}
	r.runq = runqSince(b, rq0)
	r.threads = threadsCPU(boards) - th0
	r.wakes = takeWakes(boards...).sub(w0)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return r
}

// BenchmarkQueuedRateInterleaved measures what BenchmarkQueuedRate's
// ratios ask, in a way a machine whose load drifts affects less: for each
// N (1, 2, 4, 8) and each way of waiting (wait=poll: the progress threads
// poll their rings; wait=irq: they sleep on their queues' unmoderated
// MSI-X vectors once their rings are empty) it alternates three
// placements for five rounds of b.N messages each: N steered queues
// ("steered"), the same with each queue's thread and each pair's
// goroutine bound to a CPU ("bound", BenchmarkQueuedRate's steered-bound)
// and one queue ("1q"). It reports the medians of each placement's msgs/s,
// of its CPU time per message (as BenchmarkQueuedRate's cpu-us/msg, which
// the machine's load moves less than the rates) and its progress threads'
// own, of its cpus and runq-threads (as BenchmarkQueuedRate's: the CPUs
// the run used, and how many of its threads waited for one), and of the
// per-round ratios steered/1q and bound/1q; and the median steered rate
// over the median one-pair steered rate of the same wait ("steered-x1",
// N > 1). Its ns/op is the last measurement's alone.
func BenchmarkQueuedRateInterleaved(b *testing.B) {
	const rounds = 5
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	type place struct {
		name         string
		steered, bnd bool
	}
	places := []place{{"steered", true, false}, {"bound", true, true}, {"1q", false, false}}
	one := map[bool]float64{} // median steered rate of one pair, by wait
	for _, n := range []int{1, 2, 4, 8} {
		for _, irq := range []bool{false, true} {
			wait := "poll"
			if irq {
				wait = "irq"
			}
			b.Run(fmt.Sprintf("endpoints=%d/wait=%s", n, wait), func(b *testing.B) {
				got := make([][]queuedRate, len(places))
				for range rounds {
					for i, p := range places {
						queues := 1
						if p.steered {
							queues = n
						}
						got[i] = append(got[i], runQueuedRate(b, n, queues, p.bnd, irq, b.N))
					}
				}
				of := func(i int, f func(queuedRate) float64) float64 {
					v := make([]float64, rounds)
					for k, r := range got[i] {
						v[k] = f(r)
					}
					return median(v)
				}
				oneQueue := len(places) - 1
				for i, p := range places {
					b.ReportMetric(of(i, queuedRate.perSecond), p.name+"-msgs/s")
					b.ReportMetric(of(i, queuedRate.cpuPerMsg), p.name+"-cpu-us/msg")
					b.ReportMetric(of(i, queuedRate.threadsPerMsg), p.name+"-queue-cpu-us/msg")
					b.ReportMetric(of(i, queuedRate.cpus), p.name+"-cpus")
					b.ReportMetric(of(i, queuedRate.runqThreads), p.name+"-runq-threads")
					if i == oneQueue {
						continue
					}
					ratio := make([]float64, rounds)
					for k := range rounds {
						ratio[k] = got[i][k].perSecond() / got[oneQueue][k].perSecond()
					}
					b.ReportMetric(median(ratio), p.name+"/1q")
				}
				steered := of(0, queuedRate.perSecond)
				if n == 1 {
					one[irq] = steered
				} else if one[irq] > 0 {
					b.ReportMetric(steered/one[irq], "steered-x1")
				}
			})
		}
	}
}

// The benchmarks' run-queue figure reads the kernel's schedstat lines:
// the second of three fields, and an error that names the line otherwise;
// procSched has a reading for the calling thread.
func TestProcSched(t *testing.T) {
	for _, c := range []struct {
		line string
		want int64
		ok   bool
	}{
		{"1523476 98321 17\n", 98321, true},
		{"0 0 0", 0, true},
		{"1523476 98321", 0, false},
		{"", 0, false},
		{"1 x 2", 0, false},
	} {
		got, err := parseSchedstat(c.line)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseSchedstat(%q) = %d, %v; want %d, ok %v", c.line, got, err, c.want, c.ok)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, ok := procSched(t)[unix.Gettid()]; !ok {
		t.Fatalf("no schedstat reading for the calling thread %d", unix.Gettid())
	}
}
