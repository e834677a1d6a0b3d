package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/gomx-dev/gomx/internal/units"
)

// jobTable is the human table of a job's rank 0: the columns of the
// command, and how the messages moved.
type jobTable struct {
	w        io.Writer
	cmd      string
	lastKind string
}

func (t *jobTable) header(what string) {
	fmt.Fprintf(t.w, "# %s\n# %s, GOMAXPROCS %d\n", what, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(t.w, "# strategy: how the messages moved between the processes (eager, rings, cma, or mx's name for it); fallbacks: single copies refused, sent through the rings. `mxbench %s -h` explains every column.\n", t.cmd)
	switch t.cmd {
	case "alltoall":
		fmt.Fprintf(t.w, "%10s %8s %10s %10s %10s %10s %10s %10s\n", "size", "rounds", "t_min_us", "t_avg_us", "t_max_us", "MB/s", "strategy", "fallbacks")
	case "overlap":
	default:
		lat := "latency_us"
		if t.cmd == "stream" {
			lat = "us_per_msg"
		}
		fmt.Fprintf(t.w, "%10s %8s %12s %10s %6s %10s %10s %10s\n", "size", "iters", lat, "MB/s", "errors", "asked", "strategy", "fallbacks")
	}
}

func (t *jobTable) row(r result) {
	asked := r.StrategyAsked
	if asked == "" {
		asked = "(mx)"
	}
	switch t.cmd {
	case "alltoall":
		fmt.Fprintf(t.w, "%10s %8d %10.2f %10.2f %10.2f %10.1f %10s %10d\n", units.Format(int64(r.Size)), r.Iterations,
			r.TMinUS, r.TAvgUS, r.TMaxUS, r.MBPerS, r.Strategy, r.Fallbacks)
	case "overlap":
		if r.Kind != t.lastKind {
			t.lastKind = r.Kind
			if r.Kind == "timings" {
				fmt.Fprintf(t.w, "# EMP Table 2: %s messages in batches of %d, per call\n", units.Format(empSize), empBatch)
				fmt.Fprintf(t.w, "%10s %8s %12s %12s %10s %10s %10s %10s\n", "size", "batches", "post_send_us", "post_recv_us", "wait_us", "total_us", "asked", "strategy")
			} else {
				fmt.Fprintf(t.w, "# RMPP processor availability: computation time alone / while every message is answered\n")
				fmt.Fprintf(t.w, "%10s %8s %12s %10s %10s %10s %10s\n", "size", "msgs", "availability", "MB/s", "asked", "strategy", "fallbacks")
			}
		}
		if r.Kind == "timings" {
			fmt.Fprintf(t.w, "%10s %8d %12.2f %12.2f %10.2f %10.2f %10s %10s\n", units.Format(int64(r.Size)), r.Iterations,
				r.PostSendUS, r.PostRecvUS, r.WaitUS, r.LatencyUS, asked, r.Strategy)
		} else {
			fmt.Fprintf(t.w, "%10s %8d %12.3f %10.1f %10s %10s %10d\n", units.Format(int64(r.Size)), r.Iterations,
				r.Availability, r.MBPerS, asked, r.Strategy, r.Fallbacks)
		}
	default:
		fmt.Fprintf(t.w, "%10s %8d %12.2f %10.1f %6d %10s %10s %10d\n", units.Format(int64(r.Size)), r.Iterations, r.LatencyUS, r.MBPerS,
			r.Errors, asked, r.Strategy, r.Fallbacks)
	}
}
