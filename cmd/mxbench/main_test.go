package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/netns"
)

// runOK runs mxbench with args and fails the test on an error.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(&out, &errb, args); err != nil {
		t.Fatalf("mxbench %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// jsonRows decodes one result per line.
func jsonRows(t *testing.T, out string) []result {
	t.Helper()
	var rows []result
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		rows = append(rows, r)
	}
	return rows
}

// TestStrategies: `mxbench strategies` lists every strategy --strategy
// all runs, one a line, each one --strategy accepts.
func TestStrategies(t *testing.T) {
	got := strings.Fields(runOK(t, "strategies"))
	if !slices.Equal(got, mxStrategies()) || !slices.Contains(got, "engine") {
		t.Fatalf("mxbench strategies: %q, want %q", got, mxStrategies())
	}
	for _, s := range got {
		if l, err := jobStrategies(s); err != nil || !slices.Equal(l, []string{s}) {
			t.Errorf("--strategy %s: %v, %v", s, l, err)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no subcommand"},
		{[]string{"frobnicate"}, "unknown subcommand"},
		{[]string{"pingpong", "--transport", "carrier-pigeon"}, "want loopback, udp, xdp, nic or usb"},
		{[]string{"pingpong", "--transport", "loopback", "--peer", "h:1"}, "--peer needs a network transport"},
		{[]string{"pingpong", "--transport", "udp", "--dup", "-0.1"}, "want a fraction"},
		{[]string{"pingpong", "--loss", "1.5"}, "want a fraction"},
		{[]string{"pingpong", "--sizes", "4KB"}, "ambiguous"},
		{[]string{"pingpong", "--start", "8K", "--end", "4K"}, "above --end"},
		{[]string{"pingpong", "--wait", "sometimes"}, "want spin, block or auto"},
		{[]string{"alltoall", "--yield", "sometimes"}, "--yield \"sometimes\": want auto, always or never"},
		{[]string{"stream", "--window", "0"}, "want at least 1"},
		{[]string{"pingpong", "--settle", "-1ms"}, "--settle must not be negative"},
		{[]string{"pingpong", "--trials", "0"}, "--trials 0: want at least 1"},
		{[]string{"pingpong", "--transport", "loopback", "--trials", "5", "--interleave"}, "--interleave compares mx with the raw exchange"},
		{[]string{"pingpong", "--transport", "xdp", "--trials", "2", "--interleave"}, "--interleave takes the median of --trials pairs"},
		{[]string{"stream", "--trials", "3"}, "stream has no flag --trials: only pingpong has it"},
		{[]string{"pingpong", "--trials", "3", "--transport", "udp", "--peer", "127.0.0.1:1"}, "--trials is not passed to an mxbench serve"},
		{[]string{"pingpong", "extra"}, "unexpected arguments"},
		{[]string{"serve", "--listen", "nohost"}, "--listen"},
		{[]string{"strategies", "extra"}, "takes no arguments"},
	} {
		var out, errb bytes.Buffer
		err := run(&out, &errb, tc.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mxbench %v: error %v, want a usage error containing %q", tc.args, err, tc.want)
		}
		if code(err) != 2 {
			t.Errorf("mxbench %v: exit status %d, want 2", tc.args, code(err))
		}
	}
	var out bytes.Buffer
	if err := run(&out, &out, []string{"pingpong", "-h"}); !errors.Is(err, flag.ErrHelp) || code(err) != 0 {
		t.Errorf("-h: %v (status %d)", err, code(err))
	}
	if !strings.Contains(out.String(), "--iterations") && !strings.Contains(out.String(), "-iterations") {
		t.Errorf("-h output lacks the flags:\n%s", out.String())
	}
}

func TestDefaultSweep(t *testing.T) {
	var f benchFlags
	fs := newFlags("pingpong", new(bytes.Buffer))
	f.register(fs, "pingpong")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	sizes, err := f.validate("pingpong")
	if err != nil {
		t.Fatal(err)
	}
	if len(sizes) != 24 || sizes[0] != 0 || sizes[1] != 1 || sizes[2] != 2 || sizes[len(sizes)-1] != 4<<20 {
		t.Fatalf("default sweep %v: want 0, 1, 2, 4 ... 4 MiB", sizes)
	}
	if n := f.iterationsFor(4 << 20); n != 64 {
		t.Errorf("iterations for 4 MiB = %d, want 64 (256 MiB per size)", n)
	}
	if n := f.iterationsFor(8); n != defaultIterations {
		t.Errorf("iterations for 8 B = %d, want %d", n, defaultIterations)
	}
}

func TestPingPongLoopbackVerified(t *testing.T) {
	out := runOK(t, "pingpong", "--sizes", "0,1,32,33,128,129,4K,40K", "--iterations", "20", "--warmup", "2", "--verify", "--json")
	rows := jsonRows(t, out)
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if r.Errors != 0 || r.Iterations != 20 || r.LatencyUS <= 0 {
			t.Errorf("row %+v: want 20 iterations, no errors, a latency", r)
		}
		if r.Baseline == nil || r.Baseline.Transport != "udp" || r.Baseline.LatencyUS <= 0 {
			t.Errorf("size %d: baseline %+v, want a UDP figure beside it", r.Size, r.Baseline)
		}
	}
}

// TestSettleBeforeFirstSize: the settling round trips run before the
// first size, both sides in this process and between processes, the
// header says so, and none of them is taken for a data message (every
// byte of the sizes after them is verified); --settle 0 leaves them out.
func TestSettleBeforeFirstSize(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"pingpong", "--settle", "20ms"}, true},
		{[]string{"stream", "--settle", "20ms", "--window", "4"}, true},
		{[]string{"pingpong", "--settle", "0"}, false},
	} {
		args := append(c.args, "--sizes", "0,8,4K", "--iterations", "20", "--warmup", "1", "--verify", "--baseline=false")
		out := runOK(t, args...)
		if got := strings.Contains(out, "20ms of round trips before the first size"); got != c.want {
			t.Errorf("mxbench %s: header names the settling round trips: %v, want %v:\n%s", strings.Join(args, " "), got, c.want, out)
		}
		if !strings.Contains(out, "4 KiB") {
			t.Errorf("mxbench %s: no 4 KiB row:\n%s", strings.Join(args, " "), out)
		}
	}
	out := runJob(t, "pingpong", "--procs", "2", "--settle", "20ms", "--sizes", "8,4K", "--iterations", "20", "--warmup", "1",
		"--wait", "block", "--verify", "--baseline=false")
	if !strings.Contains(out, "20ms of round trips before the first size") || !strings.Contains(out, "4 KiB") {
		t.Errorf("--procs 2 --settle 20ms: want the settling round trips in the header and every size:\n%s", out)
	}
}

func TestStreamAndBlockingWaits(t *testing.T) {
	out := runOK(t, "stream", "--sizes", "8,64K", "--iterations", "50", "--window", "8", "--wait", "block", "--verify", "--baseline=false")
	if !strings.Contains(out, "blocking waits") || !strings.Contains(out, "64 KiB") {
		t.Fatalf("unexpected table:\n%s", out)
	}
}

func TestFaultyWireEveryByte(t *testing.T) {
	out := runOK(t, "pingpong", "--sizes", "8,1K,48K", "--iterations", "30", "--loss", "0.05", "--reorder", "0.05",
		"--dup", "0.02", "--corrupt", "0.01", "--seed", "7", "--verify", "--baseline=false", "--sync")
	if !strings.Contains(out, "every message arrived and every byte was verified") {
		t.Fatalf("no wire summary:\n%s", out)
	}
}

// The fault flags work on every wire, in both wait modes: off the
// loopback wire mxbench wraps each board's transport with the same fault
// model, every message still arrives byte-exact, and each JSON row says
// what the model did and how mx recovered (counters, never times).
//
// A loss-only run (1%, nothing reordered, duplicated or corrupted; 8 B
// and 48 KiB) is repaired on evidence and on answers: its 48 KiB messages
// alone lose some 5-15 frames on the in-process wire and 30-50 on the
// others, so resends on a SACK's or a pull's hole or on an answer
// (fast_retransmits, ask_retransmits, pull_frames_rerequested) are never
// all zero; and between gomx boards nothing resends on a timer, in either
// wait mode: no timer retransmit and no tail probe, even for a lost last
// frame (its sender asks the late peer and resends on the answer,
// docs/loss-recovery.md), in every row, the first too (the connect and
// the warm-up, before a round trip was measured: a partner asks then too,
// after the RTO's fallback). A lost ack or question needs no resend, so
// one row may show a loss and no resend: the run, not the row, is judged
// on resends.
//
// A `--loss 0` run (the model kept, dropping nothing) recovers nothing:
// no timer retransmit or tail probe, and no duplicate or pull frame asked
// for again. As in mx's TestNoSpuriousRecovery (checkNoSpurious), a wire
// that lost frames outside the model (the kernel's count of datagrams UDP
// sockets dropped for want of buffer space rose) is only logged, and one
// that delivered frames past a hole (early_stored: a loss or reordering
// by the wire, which only UDP and AF_XDP may do) is judged on its timers
// only.
func TestFaultsEveryTransport(t *testing.T) {
	for _, args := range [][]string{
		{"--transport", "loopback"},
		{"--transport", "udp"},
		{"--transport", "nic", "--nic", "model"},
		{"--transport", "usb", "--usb", "fake-ncm"},
		{"--transport", "xdp"},
	} {
		for _, wait := range []string{"block", "spin"} {
			t.Run(args[1]+"/"+wait, func(t *testing.T) {
				if args[1] == "xdp" {
					if why := netns.Missing(); why != "" {
						t.Skip(why)
					}
				}
				common := append([]string{"pingpong", "--iterations", "40", "--seed", "9",
					"--verify", "--baseline=false", "--json", "--wait", wait}, args...)
				out := runOK(t, slices.Concat(common, []string{"--sizes", "8,1K,48K", "--loss", "0.05", "--reorder", "0.05", "--dup", "0.02", "--corrupt", "0.01"})...)
				rows := jsonRows(t, out)
				if len(rows) != 3 {
					t.Fatalf("%d rows, want 3:\n%s", len(rows), out)
				}
				var frames, dropped uint64
				for _, r := range rows {
					if r.Errors != 0 || r.Faults == nil || r.Faults.Loss != 0.05 || r.Faults.Seed != 9 || r.LatencyP99US <= 0 {
						t.Fatalf("row %+v (faults %+v): want no errors, a p99 latency and the fault settings", r, r.Faults)
					}
					frames += r.Faults.Frames
					dropped += r.Faults.Dropped
				}
				// Thousands of frames at 5% loss: none lost would be a model
				// that is not there.
				if frames < 200 || dropped == 0 || dropped > frames/4 {
					t.Errorf("%d of %d frames lost at 5%% loss", dropped, frames)
				}
				checkLossOnly(t, jsonRows(t, runOK(t, slices.Concat(common, []string{"--sizes", "8,48K", "--loss", "0.01"})...)))
				kernelWire := args[1] == "udp" || args[1] == "xdp"
				var kernelDrops uint64
				if args[1] == "udp" {
					kernelDrops = udpReceiveBufferErrors(t)
				}
				rows = jsonRows(t, runOK(t, slices.Concat(common, []string{"--sizes", "8,1K,48K", "--loss", "0"})...))
				if args[1] == "udp" {
					if n := udpReceiveBufferErrors(t) - kernelDrops; n > 0 {
						t.Logf("--loss 0: the kernel dropped %d UDP datagrams for want of socket buffer space (this host's count): recovery not judged: %+v", n, rows)
						return
					}
				}
				checkLossless(t, rows, kernelWire)
			})
		}
	}
}

// checkLossOnly is TestFaultsEveryTransport's judgement of a `--loss 0.01`
// run's rows: byte-exact, the model lost frames, and the losses came back
// on evidence and answers, none on a timer, in every row: the first holds
// the connect and the warm-up, whose losses, before a round trip was
// measured, are asked about too.
func checkLossOnly(t *testing.T, rows []result) {
	t.Helper()
	if len(rows) != 2 {
		t.Fatalf("--loss 0.01: %d rows, want 2: %+v", len(rows), rows)
	}
	var dropped, repaired uint64
	for _, r := range rows {
		f, c := r.Faults, r.Recovery
		if r.Errors != 0 || f == nil || f.Loss != 0.01 || f.Reorder != 0 || f.Dup != 0 || f.Corrupt != 0 || c == nil {
			t.Fatalf("--loss 0.01: row %+v (faults %+v): want no errors, loss alone, the recovery counters", r, f)
		}
		dropped += f.Dropped
		repaired += c.FastRetransmits + c.AskRetransmits + c.PullFramesRerequested
		if c.TimerRetransmits != 0 || c.TailProbes != 0 {
			t.Errorf("--loss 0.01, %d B: %d timer retransmits, %d tail probes: a loss waited for a timer (recovery %+v, faults %+v)",
				r.Size, c.TimerRetransmits, c.TailProbes, *c, *f)
		}
	}
	if dropped == 0 || repaired == 0 {
		t.Errorf("--loss 0.01: %d frames lost, %d resent or asked for again on evidence or an answer: want both above 0 (%+v)", dropped, repaired, rows)
	}
}

// checkLossless is TestFaultsEveryTransport's judgement of a `--loss 0`
// run's rows: nothing recovered, unless a kernel's wire (UDP, AF_XDP)
// itself lost or reordered frames (checkNoSpurious in mx's tests judges
// the same way, from the transports' own counts).
func checkLossless(t *testing.T, rows []result, kernelWire bool) {
	t.Helper()
	if len(rows) != 3 {
		t.Fatalf("--loss 0: %d rows, want 3: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if r.Errors != 0 || r.Faults == nil || r.Faults.Frames == 0 || r.Faults.Dropped != 0 || r.Recovery == nil {
			t.Fatalf("--loss 0: row %+v (faults %+v): want no errors, frames through the model, none dropped, the recovery counters", r, r.Faults)
		}
		c := r.Recovery
		if c.TimerRetransmits != 0 || c.TailProbes != 0 {
			t.Errorf("--loss 0, %d B: %d timer retransmits, %d tail probes on a lossless wire (recovery %+v)", r.Size, c.TimerRetransmits, c.TailProbes, *c)
		}
		if c.EarlyStored != 0 && kernelWire {
			t.Logf("--loss 0, %d B: the wire delivered %d frames past a hole: resends on that evidence not judged (recovery %+v)", r.Size, c.EarlyStored, *c)
			continue
		}
		if c.DuplicatesReceived != 0 || c.PullFramesRerequested != 0 {
			t.Errorf("--loss 0, %d B: %d duplicates received, %d pull frames asked for again on a lossless wire (recovery %+v)",
				r.Size, c.DuplicatesReceived, c.PullFramesRerequested, *c)
		}
	}
}

// udpReceiveBufferErrors returns the kernel's count of UDP datagrams this
// network namespace dropped for want of socket buffer space
// (RcvbufErrors in /proc/net/snmp). It counts every process's sockets:
// a rise only says frames may have been lost outside mx.
func udpReceiveBufferErrors(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		if i := slices.Index(names, "RcvbufErrors"); i > 0 && i < len(f) {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				t.Fatalf("/proc/net/snmp: Udp RcvbufErrors %q: %v", f[i], err)
			}
			return n
		}
	}
	t.Fatalf("/proc/net/snmp has no Udp RcvbufErrors:\n%s", b)
	return 0
}

func TestParamsRoundTrip(t *testing.T) {
	p := params{mode: modeStream, flags: flagVerify | flagBaseline, warmup: 3, window: 16,
		sizes: []int{0, 8, 4 << 20}, iters: []int{1000, 1000, 64}}
	q, err := decodeParams(p.encode())
	if err != nil {
		t.Fatal(err)
	}
	if q.mode != p.mode || q.flags != p.flags || q.warmup != 3 || q.window != 16 || len(q.sizes) != 3 || q.sizes[2] != 4<<20 || q.iters[2] != 64 {
		t.Fatalf("decoded %+v, want %+v", q, p)
	}
	bad := p.encode()
	bad[4] = 9
	if _, err := decodeParams(bad); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("bad mode: %v", err)
	}
	if _, err := decodeParams(p.encode()[:30]); err == nil {
		t.Error("truncated parameters accepted")
	}
}

// FuzzDecodeParams feeds the server's decoder of client bytes: it must
// never panic, and what it accepts survives an encode/decode round trip.
func FuzzDecodeParams(f *testing.F) {
	f.Add((&params{mode: modePingPong, window: 1, sizes: []int{8}, iters: []int{10}}).encode())
	f.Add((&params{mode: modeStream, flags: 15, warmup: 10, window: 16, sizes: []int{0, 1 << 20}, iters: []int{1, 2}}).encode())
	f.Add([]byte("MXB1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeParams(b)
		if err != nil {
			return
		}
		q, err := decodeParams(p.encode())
		if err != nil {
			t.Fatalf("re-encoding %+v gives bytes the decoder refuses: %v", p, err)
		}
		if q.mode != p.mode || q.flags != p.flags || q.warmup != p.warmup || q.window != p.window ||
			!slices.Equal(q.sizes, p.sizes) || !slices.Equal(q.iters, p.iters) {
			t.Fatalf("round trip changed %+v into %+v", p, q)
		}
		if len(p.sizes) != len(p.iters) || len(p.sizes) == 0 {
			t.Fatalf("accepted %d sizes and %d iteration counts", len(p.sizes), len(p.iters))
		}
	})
}

// freePortPair returns a UDP port p on 127.0.0.1 such that p and p+1 were
// free a moment ago (serve uses p for mx and p+1 for the baseline).
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 50 {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := c.LocalAddr().(*net.UDPAddr).Port
		c.Close()
		if p >= 65534 {
			continue
		}
		if c2, err := net.ListenPacket("udp4", fmt.Sprintf("127.0.0.1:%d", p+1)); err == nil {
			c2.Close()
			return p
		}
	}
	t.Fatal("no pair of free UDP ports on 127.0.0.1")
	return 0
}

// serveAndRun starts `mxbench serve --once` on a free loopback port, runs
// the client whose arguments args gives for that address (retrying while
// the server is not listening yet), waits for the server to finish, and
// returns the client's output and the server's address.
func serveAndRun(t *testing.T, args func(addr string) []string) (string, string) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePortPair(t))
	var sout, serr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(&sout, &serr, []string{"serve", "--listen", addr, "--once", "--wait", "block", "--timeout", "60s"})
	}()
	var out string
	for try := 0; ; try++ {
		var o, e bytes.Buffer
		err := run(&o, &e, args(addr))
		if err == nil {
			out = o.String()
			break
		}
		if try == 20 || !strings.Contains(err.Error(), "connect") {
			t.Fatalf("client: %v\nserver output:\n%s%s", err, sout.String(), serr.String())
		}
		time.Sleep(100 * time.Millisecond) // the server is not listening yet
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v\n%s%s", err, sout.String(), serr.String())
	}
	return out, addr
}

// A client in this process runs pingpong and then stream against a server
// started with `serve`, both over UDP, with the baseline beside each size;
// then pingpong again with the fault model on the client's transport.
func TestServeClient(t *testing.T) {
	for _, tc := range []struct {
		name, cmd string
		extra     []string
	}{
		{"pingpong", "pingpong", nil},
		{"stream", "stream", nil},
		{"lossy", "pingpong", []string{"--loss", "0.02", "--dup", "0.02", "--seed", "4"}},
	} {
		cmd := tc.cmd
		t.Run(tc.name, func(t *testing.T) {
			out, addr := serveAndRun(t, func(addr string) []string {
				return append([]string{cmd, "--transport", "udp", "--peer", addr, "--sizes", "0,8,4K,100K",
					"--iterations", "20", "--warmup", "2", "--verify", "--json", "--wait", "block"}, tc.extra...)
			})
			rows := jsonRows(t, out)
			if len(rows) != 4 {
				t.Fatalf("%d rows, want 4:\n%s", len(rows), out)
			}
			doc, err := os.ReadFile("../../docs/json.md")
			if err != nil {
				t.Fatal(err)
			}
			if _, errs := cli.CheckJSONLines(doc, []byte(out)); len(errs) > 0 || !strings.Contains(out, `"peer":"`+addr+`"`) {
				t.Errorf("client records against docs/json.md: %v\n%s", errs, out)
			}
			for _, r := range rows {
				if r.Errors != 0 || r.Baseline == nil || r.Baseline.Transport != "udp" {
					t.Errorf("row %+v: want no errors and a UDP baseline", r)
				}
				if (r.Faults != nil) != (tc.extra != nil) || (r.Faults != nil && r.Faults.Frames == 0) {
					t.Errorf("row %+v: faults %+v with flags %v", r, r.Faults, tc.extra)
				}
			}
		})
	}
}

// Over AF_XDP on a veth pair mxbench makes itself: mx, the UDP baseline
// across the same pair and the raw AF_XDP exchange, all in one run, and no
// namespace left behind.
func TestXDPPingPong(t *testing.T) {
	if why := netns.Missing(); why != "" {
		if os.Getenv("GOMX_REQUIRE_XDP") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	defer noNamespaceLeft(t)()
	out := runOK(t, "pingpong", "--transport", "xdp", "--sizes", "0,8,1K,40K", "--iterations", "50", "--verify", "--json", "--wait", "block")
	rows := jsonRows(t, out)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if r.Errors != 0 || r.Baseline == nil || r.Raw == nil || r.Raw.Transport != "xdp" {
			t.Errorf("row %+v: want no errors, a UDP baseline and a raw AF_XDP figure", r)
		}
	}
}

// noNamespaceLeft notes the network namespaces there are; the function it
// returns fails the test for a namespace of this process made since and
// still there. Other packages' tests make namespaces at the same time, so
// it looks only at those named after this process.
func noNamespaceLeft(t *testing.T) func() {
	before, _ := os.ReadDir("/run/netns")
	return func() {
		had := map[string]bool{}
		for _, e := range before {
			had[e.Name()] = true
		}
		after, _ := os.ReadDir("/run/netns")
		mine := fmt.Sprintf("gomx-%d", os.Getpid()%100000)
		for _, e := range after {
			if !had[e.Name()] && strings.HasPrefix(e.Name(), mine) {
				t.Errorf("namespace %s left behind", e.Name())
			}
		}
	}
}

// --interleave over AF_XDP: raw and mx trials alternate, the row carries
// both sides' figures over all their trials and the paired comparison
// (its fields as docs/json.md lists them), --baseline=false leaves out
// only the UDP baseline, and neither veth pair is left behind.
func TestXDPInterleave(t *testing.T) {
	if why := netns.Missing(); why != "" {
		if os.Getenv("GOMX_REQUIRE_XDP") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	defer noNamespaceLeft(t)()
	out := runOK(t, "pingpong", "--transport", "xdp", "--sizes", "8", "--iterations", "50", "--warmup", "10",
		"--trials", "3", "--interleave", "--baseline=false", "--json", "--wait", "block")
	doc, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := cli.CheckJSONLines(doc, []byte(out)); len(errs) > 0 {
		t.Errorf("--interleave: %v", errs)
	}
	rows := jsonRows(t, out)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1:\n%s", len(rows), out)
	}
	r := rows[0]
	p := r.Paired
	switch {
	case r.Errors != 0 || r.Raw == nil || r.Raw.LatencyP50US <= 0 || r.LatencyP50US <= 0 || r.Baseline != nil:
		t.Errorf("row %+v: want no errors, mx's and the raw exchange's medians, and no UDP baseline", r)
	case p == nil || p.Trials != 3 || p.MxP50US <= 0 || p.RawP50US <= 0:
		t.Errorf("paired %+v: want 3 pairs of positive medians", p)
	case !(p.DiffLoUS <= p.DiffP50US && p.DiffP50US <= p.DiffHiUS) || p.Confidence != 0.75:
		t.Errorf("paired %+v: want the median difference inside its interval, of 75 %% for 3 pairs", p)
	}
}

// TestSampleStride: a short run times every round trip for its p99, a
// long one every sampleStride-th, never fewer than rttSamples of them
// nor a stride wider than rttEvery.
func TestSampleStride(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 2*rttSamples - 1, 2 * rttSamples, 100000, 1000000, 1 << 30} {
		s := sampleStride(n)
		if s < 1 || s > rttEvery {
			t.Errorf("%d round trips: stride %d, want 1..%d", n, s, rttEvery)
		}
		if n < 2*rttSamples && s != 1 {
			t.Errorf("%d round trips: stride %d, want every one timed", n, s)
		}
		if timed := (n + s - 1) / s; n >= rttSamples && timed < rttSamples {
			t.Errorf("%d round trips: %d timed, want at least %d", n, timed, rttSamples)
		}
	}
}

// TestPingPongTrials: --trials runs that many timed trials per size, the
// responder answers every round trip of every trial (a count that did not
// match would leave one side waiting until --timeout), every byte is
// checked, and the rows say how many trials they kept the best of, with
// their percentiles up to the slowest round trip; the UDP baseline beside
// them runs its trials too.
func TestPingPongTrials(t *testing.T) {
	out := runOK(t, "pingpong", "--sizes", "8,1K", "--iterations", "50", "--warmup", "5", "--trials", "3", "--verify", "--timeout", "1m", "--json")
	rows := jsonRows(t, out)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if r.Errors != 0 || r.Iterations != 50 || r.Trials != 3 || r.LatencyUS <= 0 || r.LatencyP99US <= 0 {
			t.Errorf("row %+v: want 3 trials of 50 iterations, no errors, a mean and a p99", r)
		}
		if r.LatencyP10US <= 0 || r.LatencyP10US > r.LatencyP50US || r.LatencyP50US > r.LatencyP99US ||
			r.LatencyP99US > r.LatencyP999US || r.LatencyP999US > r.LatencyMaxUS {
			t.Errorf("row %+v: want a p10, a median, a p99, a p99.9 and the slowest round trip's half, in that order", r)
		}
		if r.LatencyUS > r.LatencyMaxUS {
			t.Errorf("row %+v: mean over the slowest round trip's half", r)
		}
		// The UDP baseline does not resend: a round trip the kernel
		// dropped, or one a loaded machine kept past rawWait, counts as
		// lost. Its trials must have run, with at most one such loss.
		if r.Baseline == nil || r.Baseline.Errors > 1 || r.Baseline.LatencyUS <= 0 {
			t.Errorf("row of %d B: baseline %+v, want one that ran with at most one round trip lost", r.Size, r.Baseline)
		}
	}
	one := jsonRows(t, runOK(t, "pingpong", "--sizes", "8", "--iterations", "50", "--json"))
	if len(one) != 1 || one[0].Trials != 0 {
		t.Errorf("without --trials: rows %+v, want one row with no trials field", one)
	}
}

// TestPingPongP99LongRun: a run long enough to sample its round trips
// still reports its mean and a p99, from the round trips timed.
func TestPingPongP99LongRun(t *testing.T) {
	// The fewest round trips that are sampled (stride 2), and a bound
	// that a loaded machine under the race detector (some 3 ms per round
	// trip) stays well inside: --timeout bounds each size.
	n := 2 * rttSamples
	out := runOK(t, "pingpong", "--sizes", "8", "--iterations", strconv.Itoa(n), "--warmup", "10", "--timeout", "10m", "--json")
	rows := jsonRows(t, out)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1:\n%s", len(rows), out)
	}
	if sampleStride(n) < 2 {
		t.Fatalf("%d round trips: stride %d, want them sampled", n, sampleStride(n))
	}
	if r := rows[0]; r.Errors != 0 || r.Iterations != n || r.LatencyUS <= 0 || r.LatencyP99US <= 0 || r.LatencyP50US <= 0 || r.LatencyP50US > r.LatencyP99US {
		t.Errorf("row %+v: want %d iterations, no errors, a mean, a median and a p99", r, n)
	}
}

// TestSizeOverTimeoutNamesFix: a size whose run outlasts --timeout fails
// with an error that names the flag to raise, not a bare "context deadline
// exceeded". The run is far longer than the bound on any machine (10^9
// round trips in 50 ms), so the test does not depend on the machine's speed.
// The settling round trips are off (--settle 0): their own deadline is
// --timeout plus --settle, which a loaded machine can outlast before the
// size starts.
func TestSizeOverTimeoutNamesFix(t *testing.T) {
	var out, errb bytes.Buffer
	err := run(&out, &errb, []string{"pingpong", "--sizes", "8", "--iterations", "1000000000", "--warmup", "0",
		"--timeout", "50ms", "--settle", "0", "--baseline=false"})
	if err == nil || !strings.Contains(err.Error(), "raise --timeout or lower --iterations") {
		t.Fatalf("error %v, want one naming --timeout and --iterations", err)
	}
}
