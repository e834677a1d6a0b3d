package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/gomx-dev/gomx/internal/chart"

	"github.com/gomx-dev/gomx/internal/units"
)

// jobTable is the human table of a job's rank 0: the columns of the
// command, and how the messages moved.
type jobTable struct {
	w        io.Writer
	cmd      string
	lastKind string
	// own: overlap's availability rows carry the own and cpu_ms columns
	// (both ranks in this process, --wait block), every row alike.
	own bool
}

func (t *jobTable) header(what string) {
	fmt.Fprintf(t.w, "# %s\n# %s, GOMAXPROCS %d\n", what, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(t.w, "# strategy: how the messages moved between the processes (eager, rings, cma, staged, or mx's name for it); fallbacks: single copies refused, sent through the rings. `mxbench %s -h` explains every column.\n", t.cmd)
	switch t.cmd {
	case "alltoall":
		fmt.Fprintf(t.w, "# shm_MiB: the most shared memory a rank mapped; node_MiB: the node's, each segment once; rings: the most rings (both ways) of a rank; rss_MiB: the largest peak resident memory of a rank\n")
		fmt.Fprintf(t.w, "%10s %8s %8s %10s %10s %10s %10s %9s %10s %10s %8s %9s %6s %8s\n", "size", "rounds", "warmup", "t_min_us", "t_avg_us", "t_max_us", "MB/s", "schedule", "strategy", "fallbacks", "shm_MiB", "node_MiB", "rings", "rss_MiB")
	case "overlap":
	default:
		lat := "latency_us"
		if t.cmd == "stream" {
			lat = "us_per_msg"
		}
		fmt.Fprintf(t.w, "# cpu_us, cs: the CPU time (µs) and context switches of ranks 0 and 1 together per message; idle_cpu: the CPUs the ranks other than 0 and 1 (which only connected, and wait) used while the pair ran the size\n")
		fmt.Fprintf(t.w, "%10s %8s %12s %10s %6s %10s %10s %10s %8s %6s %8s\n", "size", "iters", lat, "MB/s", "errors", "asked", "strategy", "fallbacks", "cpu_us", "cs", "idle_cpu")
	}
}

func (t *jobTable) row(r result) {
	asked := r.StrategyAsked
	if asked == "" {
		asked = "(mx)"
	}
	switch t.cmd {
	case "alltoall":
		warmup := 0
		if r.Warmup != nil {
			warmup = *r.Warmup
		}
		fmt.Fprintf(t.w, "%10s %8d %8d %10.2f %10.2f %10.2f %10.1f %9s %10s %10d %8.1f %9.1f %6d %8.1f\n", units.Format(int64(r.Size)), r.Iterations, warmup,
			r.TMinUS, r.TAvgUS, r.TMaxUS, r.MBPerS, r.Schedule, r.Strategy, r.Fallbacks, float64(r.ShmMappedMax)/(1<<20), float64(r.ShmNodeBytes)/(1<<20), r.ShmRingsMax, float64(r.RSSMax)/(1<<20))
	case "overlap":
		if r.Kind != t.lastKind {
			t.lastKind = r.Kind
			if r.Kind == "timings" {
				fmt.Fprintf(t.w, "# EMP Table 2: %s messages in batches of %d, per call\n", units.Format(empSize), empBatch)
				fmt.Fprintf(t.w, "%10s %8s %12s %12s %10s %10s %10s %10s\n", "size", "batches", "post_send_us", "post_recv_us", "wait_us", "total_us", "asked", "strategy")
			} else {
				fmt.Fprintf(t.w, "# RMPP processor availability: computation time alone / while every message is answered\n")
				fmt.Fprintf(t.w, "%10s %8s %12s %10s %10s %10s %10s %10s %11s", "size", "msgs", "availability", "MB/s", "asked", "strategy", "fallbacks", "preempted", "runq_ms")
				if t.own {
					fmt.Fprintf(t.w, " %9s %15s %7s", "own", "cpu_ms own/rest", "wakes")
				}
				if r.Copies != nil {
					// Both ranks in this process: what each copied.
					fmt.Fprintf(t.w, " | %6s %6s %6s %6s %7s", "a cp/s", "a cp/r", "b cp/s", "b cp/r", "pull rq")
				}
				fmt.Fprintln(t.w)
			}
		}
		if r.Kind == "timings" {
			fmt.Fprintf(t.w, "%10s %8d %12.2f %12.2f %10.2f %10.2f %10s %10s\n", units.Format(int64(r.Size)), r.Iterations,
				r.PostSendUS, r.PostRecvUS, r.WaitUS, r.LatencyUS, asked, r.Strategy)
		} else {
			fmt.Fprintf(t.w, "%10s %8d %12.3f %10.1f %10s %10s %10d %10d %11s", units.Format(int64(r.Size)), r.Iterations,
				r.Availability, r.MBPerS, asked, r.Strategy, r.Fallbacks, r.Preempted, fmt.Sprintf("%.0f/%.0f", r.RunQueueMS, r.QuietRunQueueMS))
			switch {
			case t.own && r.OwnAvailability > 0:
				fmt.Fprintf(t.w, " %9.3f %15s %7.1f", r.OwnAvailability, fmt.Sprintf("%.0f/%.0f", r.OwnCPUMS, r.RestCPUMS), r.OwnWakeups)
			case t.own:
				fmt.Fprintf(t.w, " %9s %15s %7s", "-", "-", "-") // the kernel gave no thread clock
			}
			if c := r.Copies; c != nil {
				rq := uint64(0)
				if r.Recovery != nil {
					rq = r.Recovery.PullFramesRerequested
				}
				fmt.Fprintf(t.w, " | %6.2f %6.2f %6.2f %6.2f %7d", c.A.SendPerByte, c.A.RecvPerByte, c.B.SendPerByte, c.B.RecvPerByte, rq)
			}
			fmt.Fprintln(t.w)
		}
	default:
		idle := "-"
		if r.Procs > 2 {
			idle = fmt.Sprintf("%.2f", r.IdleCPU)
		}
		fmt.Fprintf(t.w, "%10s %8d %12.2f %10.1f %6d %10s %10s %10d %8.2f %6.2f %8s\n", units.Format(int64(r.Size)), r.Iterations, r.LatencyUS, r.MBPerS,
			r.Errors, asked, r.Strategy, r.Fallbacks, r.PairCPUUS, r.PairSwitches, idle)
	}
}

// plotJob draws a job's rows: one curve per strategy the boards were
// given (--strategy all draws them all on one chart), throughput into
// path and latency (alltoall: t_avg; overlap: availability) beside it.
func (r *recorder) plotJob(cmd, path string, stdout io.Writer, quiet bool) error {
	type curve struct{ x, mbs, lat []float64 }
	var order []string
	curves := map[string]*curve{}
	for _, row := range r.rows {
		if row.Kind == "timings" || row.Size == 0 {
			continue // EMP's one point; a log axis has no 0
		}
		name := row.StrategyAsked
		if name == "" {
			name = "mx's choice"
		}
		c := curves[name]
		if c == nil {
			c = &curve{}
			curves[name] = c
			order = append(order, name)
		}
		y := row.LatencyUS
		if cmd == "overlap" {
			y = row.Availability
		}
		c.x, c.mbs, c.lat = append(c.x, float64(row.Size)), append(c.mbs, row.MBPerS), append(c.lat, y)
	}
	var bw, lat []chart.Series
	for _, name := range order {
		c := curves[name]
		if len(c.x) < 2 {
			return fmt.Errorf("--plot %s: %s has %d size above 0; a curve needs two or more", path, name, len(c.x))
		}
		label := fmt.Sprintf("mx, %d processes, large messages: %s", r.rows[0].Procs, name)
		if r.rows[0].Procs == 0 {
			label = "mx, both ranks in this process, large messages: " + name
		}
		bw = append(bw, chart.Series{Name: label, X: c.x, Y: c.mbs})
		lat = append(lat, chart.Series{Name: label, X: c.x, Y: c.lat})
	}
	latLabel := map[string]string{"stream": "time per message (us)", "alltoall": "t_avg per round (us)",
		"overlap": "processor availability"}[cmd]
	if latLabel == "" {
		latLabel = "one-way latency (us)"
	}
	if err := (chart.Chart{Title: "mxbench " + cmd + ": throughput", XLabel: "message size (bytes)", YLabel: "MB/s (10^6 bytes/s)",
		LogX: true, Series: bw}).Save(path); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	latPath := latencyPath(path)
	if err := (chart.Chart{Title: "mxbench " + cmd + ": " + latLabel, XLabel: "message size (bytes)", YLabel: latLabel,
		LogX: true, Series: lat}).Save(latPath); err != nil {
		return fmt.Errorf("--plot %s: %w", latPath, err)
	}
	if !quiet {
		fmt.Fprintf(stdout, "# plots: %s (throughput), %s (%s)\n", path, latPath, latLabel)
	}
	return nil
}
