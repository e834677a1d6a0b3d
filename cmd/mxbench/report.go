package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"

	"github.com/gomx-dev/gomx/internal/chart"
	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/units"
)

// reporter prints results as they come.
type reporter interface {
	header(what string)
	row(r result)
}

// schemaFor names and versions the JSON record of pingpong or stream
// (docs/json.md).
func schemaFor(cmd string) string { return "mxbench." + cmd + "/1" }

// jsonRecord is one JSON line: the run's description, then one size's
// figures (result's fields, inline).
type jsonRecord struct {
	Schema    string   `json:"schema"`
	Run       cli.Meta `json:"run"`
	Command   string   `json:"command"`
	Transport string   `json:"transport"`
	// Setup is the header's description of the wire and both sides.
	Setup string `json:"setup"`
	Peer  string `json:"peer,omitempty"`
	Wait  string `json:"wait"`
	// WaitWhy says why Wait runs: given, or --wait auto's choice.
	WaitWhy string `json:"wait_why"`
	Sync    bool   `json:"sync"`
	Verify  bool   `json:"verify"`
	result
}

// jsonReporter writes one jsonRecord per size.
type jsonReporter struct {
	enc *json.Encoder
	rec jsonRecord
}

// header also takes GOMAXPROCS again, as the table's header does: a rank
// bound to one CPU changed it after the record was made (runJobCommand).
func (j *jsonReporter) header(what string) {
	j.rec.Setup = what
	j.rec.Run.GOMAXPROCS = runtime.GOMAXPROCS(0)
}
func (j *jsonReporter) row(r result) {
	j.rec.result = r
	_ = j.enc.Encode(j.rec)
}

// tableReporter writes the human table.
type tableReporter struct {
	w   io.Writer
	cmd string
	raw bool // a raw-transport column follows the UDP one
}

func (t *tableReporter) header(what string) {
	fmt.Fprintf(t.w, "# %s\n# %s, GOMAXPROCS %d\n", what, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(t.w, "# errors: mx operations that failed (mx resends what the wire loses; any error stops the run)\n")
	fmt.Fprintf(t.w, "# udp er: baseline datagrams lost and not resent (UDP has no retransmission): its MB/s moved that much less\n")
	fmt.Fprintf(t.w, "# lat x: mx latency / baseline latency. `mxbench %s -h` explains every column.\n", t.cmd)
	lat := "latency_us"
	if t.cmd == "stream" {
		lat = "us_per_msg"
	}
	fmt.Fprintf(t.w, "%10s %8s %12s %10s %6s | %12s %10s %6s %7s",
		"size", "iters", lat, "MB/s", "errors", "udp "+lat, "udp MB/s", "udp er", "lat x")
	if t.raw {
		fmt.Fprintf(t.w, " | %12s %10s %7s", "raw "+lat, "raw MB/s", "lat x")
	}
	fmt.Fprintf(t.w, " | %6s %6s %6s %6s %7s", "fast", "timer", "tlp", "dups", "pull rq")
	fmt.Fprintf(t.w, " | %6s %6s %6s %6s", "a cp/s", "a cp/r", "b cp/s", "b cp/r")
	fmt.Fprintln(t.w)
}

func (t *tableReporter) row(r result) {
	fmt.Fprintf(t.w, "%10s %8d %12.2f %10.1f %6d |", units.Format(int64(r.Size)), r.Iterations, r.LatencyUS, r.MBPerS, r.Errors)
	if b := r.Baseline; b != nil {
		ratio := 0.0
		if b.LatencyUS > 0 {
			ratio = r.LatencyUS / b.LatencyUS
		}
		fmt.Fprintf(t.w, " %12.2f %10.1f %6d %6.2fx", b.LatencyUS, b.MBPerS, b.Errors, ratio)
	}
	if b := r.Raw; b != nil {
		ratio := 0.0
		if b.LatencyUS > 0 {
			ratio = r.LatencyUS / b.LatencyUS
		}
		fmt.Fprintf(t.w, " | %12.2f %10.1f %6.2fx", b.LatencyUS, b.MBPerS, ratio)
	}
	if c := r.Recovery; c != nil {
		fmt.Fprintf(t.w, " | %6d %6d %6d %6d %7d", c.FastRetransmits, c.TimerRetransmits, c.TailProbes,
			c.DuplicatesReceived, c.PullFramesRerequested)
	}
	if c := r.Copies; c != nil {
		fmt.Fprintf(t.w, " | %6.2f %6.2f %6.2f %6.2f", c.A.SendPerByte, c.A.RecvPerByte, c.B.SendPerByte, c.B.RecvPerByte)
	}
	fmt.Fprintln(t.w)
	if p := r.Paired; p != nil {
		fmt.Fprintf(t.w, "# %s, %d trials of mx and of raw alternated: median one-way mx %.2f us, raw %.2f us; mx - raw, median of the pairs %.2f us (%.2f to %.2f, %.0f %% confidence)\n",
			units.Format(int64(r.Size)), p.Trials, p.MxP50US, p.RawP50US, p.DiffP50US, p.DiffLoUS, p.DiffHiUS, 100*p.Confidence)
	}
}

// recorder passes results to a reporter, erasing the progress line first,
// and keeps them for --plot.
type recorder struct {
	reporter
	prog *cli.Progress
	rows []result
	what string
}

func (r *recorder) header(what string) {
	r.prog.Clear()
	r.what = what
	r.reporter.header(what)
}

func (r *recorder) row(res result) {
	r.prog.Clear()
	r.rows = append(r.rows, res)
	r.reporter.row(res)
}

// plot draws the rows into path: latency for pingpong (one-way, us) or
// time per message for stream, and throughput, mx beside its baselines.
// Two charts would hide the comparison; one chart per figure keeps each
// readable, so the throughput chart goes to path and the latency one
// beside it, with "-latency" before the extension.
func (r *recorder) plot(cmd, path, transport string, stdout io.Writer, quiet bool) error {
	if len(r.rows) < 2 {
		return fmt.Errorf("--plot %s: %d size measured; a curve needs two or more (--sizes or --start/--end)", path, len(r.rows))
	}
	if r.rows[0].Procs > 0 || cmd == "overlap" {
		return r.plotJob(cmd, path, stdout, quiet)
	}
	var x, mbs, lat, umbs, ulat, rmbs, rlat []float64
	zero := false
	for _, row := range r.rows {
		zero = zero || row.Size == 0
		x = append(x, float64(row.Size))
		mbs, lat = append(mbs, row.MBPerS), append(lat, row.LatencyUS)
		if b := row.Baseline; b != nil {
			umbs, ulat = append(umbs, b.MBPerS), append(ulat, b.LatencyUS)
		}
		if b := row.Raw; b != nil {
			rmbs, rlat = append(rmbs, b.MBPerS), append(rlat, b.LatencyUS)
		}
	}
	series := func(mx, udp, raw []float64) []chart.Series {
		s := []chart.Series{{Name: "mx over " + transport, X: x, Y: mx}}
		if len(udp) == len(x) {
			s = append(s, chart.Series{Name: "UDP socket baseline", X: x, Y: udp})
		}
		if len(raw) == len(x) {
			s = append(s, chart.Series{Name: "raw " + transport + " (no mx)", X: x, Y: raw})
		}
		return s
	}
	latLabel := "one-way latency (us)"
	if cmd == "stream" {
		latLabel = "time per message (us)"
	}
	bw := chart.Chart{Title: "mxbench " + cmd + ": throughput", XLabel: "message size (bytes)", YLabel: "MB/s (10^6 bytes/s)",
		LogX: true, Series: series(mbs, umbs, rmbs)}
	if err := bw.Save(path); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	latPath := latencyPath(path)
	lc := chart.Chart{Title: "mxbench " + cmd + ": latency", XLabel: "message size (bytes)", YLabel: latLabel,
		LogX: true, Series: series(lat, ulat, rlat)}
	if err := lc.Save(latPath); err != nil {
		return fmt.Errorf("--plot %s: %w", latPath, err)
	}
	if !quiet {
		note := ""
		if zero {
			note = " (size 0 left out: a log axis has no 0)"
		}
		fmt.Fprintf(stdout, "# plots: %s (throughput), %s (latency)%s\n", path, latPath, note)
	}
	return nil
}

// latencyPath is the latency chart's file beside the throughput chart's:
// "pp.svg" gives "pp-latency.svg".
func latencyPath(path string) string {
	for i := len(path) - 1; i >= 0 && path[i] != '/'; i-- {
		if path[i] == '.' {
			return path[:i] + "-latency" + path[i:]
		}
	}
	return path + "-latency"
}
