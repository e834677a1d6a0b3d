package main

import (
	"os"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/mx"
)

// How a size's messages moved between two processes, read from the
// receiving endpoint's counters over the size (warmup included): "eager"
// when no message went by rendezvous; "cma" when the receiver copied them
// once from the sender with process_vm_readv; "staged" when they went
// through the sender's staging buffers (mx.LargeStaged, which LargeAuto
// takes from mx.LocalOptions.StageMin); "rings" when it pulled them
// through the shared-memory rings; "cma+rings" when both happened (a
// refused single copy falls back to the rings); otherwise the name of the
// strategy the board was given, as mx spells it, so a strategy mx adds (a
// shared pool, an engine copy) is reported without a change here. Over
// the network (no host path) it is "network". Fallbacks are single copies
// the kernel refused or that failed, each of which went through the rings
// instead.
type moved struct {
	Strategy  string `json:"s"`
	Fallbacks uint64 `json:"f,omitempty"`
	// The rank's shared memory after the size ran (shmFootprint).
	Mapped int64 `json:"m,omitempty"`
	Owned  int64 `json:"o,omitempty"`
	Rings  int   `json:"r,omitempty"`
	// Retired: the lanes the rank retired so far (shmFootprint).
	Retired uint64 `json:"l,omitempty"`
	// AskedBack: the lanes the rank asked its producers back for busier
	// pairs so far (shmFootprint).
	AskedBack uint64 `json:"a,omitempty"`
	// RSS is the rank's peak resident memory so far (peakRSS).
	RSS int64 `json:"h,omitempty"`
	// Yield: the rank's waiters yield their CPU from their first look
	// (mx.Board.Oversubscribed).
	Yield bool `json:"y,omitempty"`
	// Bound: --procs bound the rank to one CPU (bindRanks).
	Bound bool `json:"b,omitempty"`
	// CPU is the CPU time (ns) the rank used while the pair of a
	// pingpong or stream ran the size (cpuTime): for ranks 0 and 1 over
	// their own messages, warmup included; for the others from the
	// barrier before the size to the one after, in a job of more than two
	// ranks.
	CPU int64 `json:"c,omitempty"`
	// Switches is the context switches of the rank over the same span
	// (cpuAndSwitches): each wake-up of an idle rank's sleeping thread
	// ends in one.
	Switches int64 `json:"x,omitempty"`
}

// strategyOf names what moved the messages counted in d (after - before),
// given the strategy the board was configured with ("" for mx's default).
//
// A message of size at most the shared-memory eager threshold
// (GOMX_SHM_EAGER, default mx.DefaultShmEager) that neither was copied
// once nor pulled is eager even when an RNDV frame was counted: on a
// loaded machine a resent frame of an earlier message can land in the
// window.
func strategyOf(d mx.Counters, configured string, hostPath bool, size int) moved {
	m := moved{Fallbacks: d.Get(mx.CMARefused) + d.Get(mx.CMAFailed) + d.Get(mx.EngineFallbacks)}
	cma, pulls := d.Get(mx.RecvCMA) > 0, d.Get(mx.SendPull) > 0
	shared, engine := d.Get(mx.RecvShared) > 0, d.Get(mx.RecvEngine)+d.Get(mx.EngineFallbacks) > 0
	staged := d.Get(mx.StagedRecvs) > 0
	eager := mx.DefaultShmEager
	if n, err := strconv.Atoi(os.Getenv("GOMX_SHM_EAGER")); err == nil && n > 0 {
		eager = n
	}
	switch {
	case !hostPath:
		m.Strategy = "network"
	case !cma && !pulls && !shared && !engine && !staged && (d.Get(mx.RecvRndv) == 0 || size <= eager):
		m.Strategy = "eager"
	case staged && !cma && !pulls && !shared && !engine:
		m.Strategy = mx.LargeStaged.String()
	case engine && !cma && !pulls && !shared:
		m.Strategy = mx.LargeEngine.String()
	case shared && !cma && !pulls && !engine:
		m.Strategy = mx.LargeShared.String()
	case engine || shared || staged:
		// Some messages by one single copy, some by another.
		var parts []string
		for _, p := range []struct {
			on   bool
			name string
		}{{engine, "engine"}, {shared, "shared"}, {staged, "staged"}, {cma, "cma"}, {pulls, "rings"}} {
			if p.on {
				parts = append(parts, p.name)
			}
		}
		m.Strategy = strings.Join(parts, "+")
	case cma && pulls:
		m.Strategy = "cma+rings"
	case cma:
		m.Strategy = "cma"
	case pulls:
		m.Strategy = "rings"
	case configured != "":
		m.Strategy = configured
	default:
		m.Strategy = mx.LargeAuto.String()
	}
	return m
}

// jobResult is what a row of a job adds: how many processes, how the
// messages moved, and the figures of alltoall and overlap.
type jobResult struct {
	Procs    int    `json:"procs,omitempty"`
	Strategy string `json:"strategy,omitempty"`
	// StrategyAsked is the strategy the boards were given (--strategy),
	// empty for mx's own choice; Strategy is what the counters show ran.
	StrategyAsked string `json:"strategy_asked,omitempty"`
	// Engine is the copy engine the boards had (--engine): "emulated" or
	// rank 0's PCI address; empty for none.
	Engine string `json:"engine,omitempty"`
	// EngineCPU is the CPU the emulated engine's threads ran on
	// (--engine-cpu); nil when they ran wherever the rank's did.
	EngineCPU *int   `json:"engine_cpu,omitempty"`
	Fallbacks uint64 `json:"fallbacks,omitempty"`
	// alltoall: the fastest, mean and slowest rank's time per round.
	TMinUS float64 `json:"t_min_us,omitempty"`
	TAvgUS float64 `json:"t_avg_us,omitempty"`
	TMaxUS float64 `json:"t_max_us,omitempty"`
	// alltoall: the schedule that ran (linear, pairwise or bruck).
	Schedule string `json:"schedule,omitempty"`
	// alltoall: the untimed rounds before the timed ones (--warmup, or
	// the size's default); nil for the other commands.
	Warmup *int `json:"warmup,omitempty"`
	// alltoall: the shared memory of the host path after the size ran
	// (transport/shm's Footprint): the largest any rank mapped, the
	// most rings (both ways) any rank had, and the node's total, each
	// segment counted once (the sum of what every rank created).
	ShmMappedMax int64 `json:"shm_mapped_bytes_max,omitempty"`
	ShmRingsMax  int   `json:"shm_rings_max,omitempty"`
	ShmNodeBytes int64 `json:"shm_node_bytes,omitempty"`
	// alltoall: the lanes the ranks retired since the job began (idle
	// for shm.Options.LaneIdle, GOMX_SHM_LANE_IDLE), summed.
	ShmLanesRetired uint64 `json:"shm_lanes_retired,omitempty"`
	// alltoall: the lanes the ranks, as receivers at their bound, asked
	// their producers back for busier pairs since the job began, summed.
	ShmLanesAskedBack uint64 `json:"shm_lanes_asked_back,omitempty"`
	// alltoall: the largest peak resident memory of a rank so far
	// (VmHWM), and the slowest rank's start-up: from its process's start
	// to its board open and every peer connected.
	RSSMax    int64   `json:"rss_max_bytes,omitempty"`
	StartupMS float64 `json:"startup_ms,omitempty"`
	// IdleCPU: pingpong and stream in a job of more than two ranks: the
	// CPUs the other ranks, which only connected and wait, used while
	// ranks 0 and 1 ran the size (their CPU time over its wall time). On
	// a host with fewer CPUs than ranks, what they use is taken from the
	// pair.
	IdleCPU float64 `json:"idle_cpu,omitempty"`
	// IdleSwitches: the same runs: the context switches of an idle rank
	// while the pair ran the size, the mean over those ranks: how often
	// each woke (its timers, the runtime's monitor), on CPUs the pair
	// may need.
	IdleSwitches float64 `json:"idle_switches,omitempty"`
	// PairCPUUS and PairSwitches: pingpong and stream in a job: the CPU
	// time (µs) and the context switches of ranks 0 and 1 together per
	// message they moved (warmup included; a round trip is two), what a
	// message costs its two processes, which the wall time of a loaded or
	// oversubscribed host blurs.
	PairCPUUS    float64 `json:"pair_cpu_us_per_msg,omitempty"`
	PairSwitches float64 `json:"pair_switches_per_msg,omitempty"`
	// alltoall: how many ranks' waiters yielded their CPU from their
	// first empty look after the size ran (--yield; with auto, the ranks
	// that found more processes than CPUs).
	YieldingRanks int `json:"yielding_ranks,omitempty"`
	// alltoall: how many ranks --procs bound to one CPU each (--bind; by
	// default all when the job fits the host's CPUs, none when it
	// oversubscribes them, as mpirun binds).
	BoundRanks int `json:"bound_ranks,omitempty"`
	// overlap: which measurement ("timings" or "availability"), EMP's
	// per-call times, and RMPP's availability.
	Kind         string  `json:"kind,omitempty"`
	PostSendUS   float64 `json:"post_send_us,omitempty"`
	PostRecvUS   float64 `json:"post_recv_us,omitempty"`
	WaitUS       float64 `json:"wait_us,omitempty"`
	Availability float64 `json:"availability,omitempty"`
	// Preempted is how many times the kernel preempted rank 0's computing
	// thread while every message was answered (overlap's availability;
	// omitted when none): the threads that share its CPU taking it.
	Preempted int64 `json:"preempted,omitempty"`
	// RunQueueMS and QuietRunQueueMS are how long that thread waited on
	// its CPU's run queue (runnable, not running) in the answered run and
	// in the quiet one: other work on the host, when they are large.
	RunQueueMS      float64 `json:"run_queue_ms,omitempty"`
	QuietRunQueueMS float64 `json:"quiet_run_queue_ms,omitempty"`
	// OwnAvailability is overlap's availability counted on rank 0's host
	// threads only, by their CPU clocks: its computing thread's and its
	// boards' progress threads' CPU time in the quiet run over theirs in
	// the answered run, what a host of one CPU would keep if its NIC and
	// its peer were elsewhere; above 1 when the quiet run's threads ran
	// longer (noise). OwnCPUMS is the answered run's minus the quiet run's
	// (ms, negative then); RestCPUMS the rest of the process's in the
	// answered run: rank 1, its board, the NIC models' DMA, the Go
	// runtime's other threads. Set when ranks 0 and 1 are two boards of
	// this process with --wait block (overlapLocal locks rank 0's progress
	// goroutines to threads then, and only then).
	OwnAvailability float64 `json:"own_availability,omitempty"`
	OwnCPUMS        float64 `json:"own_cpu_ms,omitempty"`
	// OwnComputeMS is the computing thread's part of OwnCPUMS: the same
	// work's CPU in the answered run minus the quiet run's (ms), what the
	// communication beside it cost the computation (caches, interrupts
	// taken on its CPU, the switches to the progress threads); the rest
	// of OwnCPUMS is the progress threads'.
	OwnComputeMS float64 `json:"own_compute_ms,omitempty"`
	RestCPUMS    float64 `json:"rest_cpu_ms,omitempty"`
	// OwnWakeups is, with OwnAvailability over --transport nic, how many
	// times an answered exchange woke rank 0's progress threads from a
	// sleep: the NIC's interrupts their receive waits consumed and their
	// sleeps that ended with nothing to do (mx counter SleepsEmpty).
	OwnWakeups float64 `json:"own_wakeups,omitempty"`
	// ProgressCPU is the CPU rank 0's other threads ran on while it
	// computed (--progress-cpu); nil when they shared its CPU.
	ProgressCPU *int `json:"progress_cpu,omitempty"`
}

// countersSince returns after - before.
func countersSince(before, after mx.Counters) mx.Counters {
	var d mx.Counters
	for i := range d {
		d[i] = after[i] - before[i]
	}
	return d
}
