package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestNICPingPongModelVerified(t *testing.T) {
	out := runOK(t, "pingpong", "--transport", "nic", "--nic", "model", "--sizes", "0,32,1K,40K", "--iterations", "20", "--warmup", "2", "--verify", "--json")
	rows := jsonRows(t, out)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if r.Errors != 0 || r.Iterations != 20 || r.LatencyUS <= 0 {
			t.Errorf("row %+v: want 20 iterations, no errors, a latency", r)
		}
	}
}

// TestNICPingPong82599ModelVerified runs over the 82599 models with their
// DMA on engines of their own (the default) and on the tail's writer
// (--nic-sync-dma): byte-exact both ways, and the processors the engines
// were given are given back when the run ends.
func TestNICPingPong82599ModelVerified(t *testing.T) {
	for _, extra := range [][]string{nil, {"--nic-sync-dma"}} {
		procs := runtime.GOMAXPROCS(0)
		args := append([]string{"pingpong", "--transport", "nic", "--nic", "model-82599", "--sizes", "0,32,1K,40K", "--iterations", "20", "--warmup", "2", "--verify", "--json"}, extra...)
		out := runOK(t, args...)
		rows := jsonRows(t, out)
		if len(rows) != 4 {
			t.Fatalf("%v: %d rows, want 4:\n%s", extra, len(rows), out)
		}
		for _, r := range rows {
			if r.Errors != 0 || r.Iterations != 20 || r.LatencyUS <= 0 {
				t.Errorf("%v: row %+v: want 20 iterations, no errors, a latency", extra, r)
			}
		}
		if p := runtime.GOMAXPROCS(0); p != procs {
			t.Errorf("%v: GOMAXPROCS %d after the run, want %d as before it", extra, p, procs)
		}
	}
}

func TestNICSyncDMAUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong", "--transport", "nic", "--nic", "model", "--nic-sync-dma"}, "needs --nic model-82599"},
		{[]string{"stream", "--transport", "loopback", "--nic-sync-dma"}, "need --transport nic"},
	} {
		var out, errb bytes.Buffer
		err := run(&out, &errb, tc.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mxbench %v: error %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestNICPingPongModelPlaced: --nic-place over the 82574L models has the
// NICs write large messages' payloads into the receive buffers (packet
// split), byte-exact, and the JSON says so.
func TestNICPingPongModelPlaced(t *testing.T) {
	out := runOK(t, "pingpong", "--transport", "nic", "--nic", "model", "--nic-place", "--no-checksum", "--baseline=false",
		"--sizes", "1M", "--iterations", "3", "--warmup", "1", "--verify", "--json")
	rows := jsonRows(t, out)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1:\n%s", len(rows), out)
	}
	r := rows[0]
	if r.Errors != 0 || r.Copies == nil || r.Copies.B.RecvPlaced == 0 || r.Copies.B.RecvPerByte > 1 {
		t.Errorf("row %+v (copies %+v): want no errors and payloads received in place", r, r.Copies)
	}
}

// TestNICStreamJumboPlaced: --nic-mtu 9000 --nic-place over the 82599
// models streams large messages in jumbo frames, byte-exact, the sender
// copying nothing and the receiver only the last reply of each message,
// and the same run without --nic-place copies once on receipt.
func TestNICStreamJumboPlaced(t *testing.T) {
	for _, place := range []bool{true, false} {
		args := []string{"stream", "--transport", "nic", "--nic", "model-82599", "--nic-mtu", "9000", "--no-checksum", "--baseline=false",
			"--sizes", "1M", "--iterations", "4", "--warmup", "1", "--verify", "--json"}
		if place {
			args = append(args, "--nic-place")
		}
		rows := jsonRows(t, runOK(t, args...))
		if len(rows) != 1 {
			t.Fatalf("place %v: %d rows, want 1", place, len(rows))
		}
		r := rows[0]
		if r.Errors != 0 || r.Copies == nil || r.Copies.A.SendPerByte != 0 {
			t.Fatalf("place %v: row %+v (copies %+v): want no errors, nothing copied to send", place, r, r.Copies)
		}
		if r.Recovery != nil && r.Recovery.PullFramesRerequested != 0 {
			// Replies asked for again come on lane 0 and are copied.
			continue
		}
		if place && r.Copies.B.RecvPerByte > 0.01 || !place && r.Copies.B.RecvPerByte < 1 {
			t.Errorf("place %v: receiver copied %.4f per byte, want about 0.0014 placed (the last reply) and 1 without", place, r.Copies.B.RecvPerByte)
		}
	}
}

// TestNICStreamPlacedBufferEdge: --nic-mtu 2030 --nic-place makes frames
// of 2048 bytes, whose VLAN-tagged kin of 2052 the 82599 also admits: the
// NICs open with 4 KiB buffers (ixgbe refuses placement otherwise) and
// the stream arrives byte-exact.
func TestNICStreamPlacedBufferEdge(t *testing.T) {
	rows := jsonRows(t, runOK(t, "stream", "--transport", "nic", "--nic", "model-82599", "--nic-mtu", "2030", "--nic-place", "--no-checksum",
		"--baseline=false", "--sizes", "64K", "--iterations", "2", "--warmup", "1", "--verify", "--json"))
	if len(rows) != 1 || rows[0].Errors != 0 {
		t.Fatalf("rows %+v: want one without errors", rows)
	}
}

// TestNICOverlap: overlap over the emulated 82599 pair, ranks 0 and 1 as
// two boards of this process, reports EMP's timings and an availability
// row with both sides' copies: with --nic-place neither side's CPU copies
// a payload byte of the large messages (sent from the sender's buffer,
// placed by the receiving NIC) when no reply was asked for again; without
// it the receiver copies each byte once.
func TestNICOverlap(t *testing.T) {
	modes := []bool{true, false}
	if raceEnabled {
		// The same code runs both ways; the race detector makes each
		// run (EMP's 200 batches over the model first) some 10 s.
		modes = modes[:1]
	}
	for _, place := range modes {
		args := []string{"overlap", "--transport", "nic", "--nic", "model-82599", "--no-checksum",
			"--sizes", "1M", "--iterations", "3", "--warmup", "1", "--wait", "block", "--json"}
		if place {
			args = append(args, "--nic-place")
		}
		out := runOK(t, args...)
		rows := jsonRows(t, out)
		if len(rows) != 2 || rows[0].Kind != "timings" || rows[1].Kind != "availability" {
			t.Fatalf("place %v: rows %+v, want EMP's timings and one availability", place, rows)
		}
		if s := setupOf(t, out); !strings.Contains(s, "MSI-X interrupts") {
			t.Errorf("place %v: setup %q: want --wait block to sleep the NICs on MSI-X interrupts", place, s)
		}
		if r := rows[0]; r.Procs != 0 || r.Size != empSize || r.PostSendUS <= 0 || r.WaitUS <= 0 {
			t.Errorf("place %v: EMP timings %+v", place, r)
		}
		r := rows[1]
		c := r.Copies
		if r.Size != 1<<20 || r.Availability <= 0 || r.Procs != 0 || r.Strategy != "network" || c == nil || r.Recovery == nil {
			t.Fatalf("place %v: availability %+v, want a 1 MiB row over the network with copies and recovery", place, r)
		}
		t.Logf("place %v: availability %.3f (own %.3f, CPU ms own %.1f rest %.1f), %d exchanges, copies a %+v b %+v, %d pull frames asked again",
			place, r.Availability, r.OwnAvailability, r.OwnCPUMS, r.RestCPUMS, r.Iterations, c.A, c.B, r.Recovery.PullFramesRerequested)
		// Rank 0's progress thread and rank 1 worked during the
		// answered run: both are counted, apart.
		if r.OwnAvailability <= 0 || r.RestCPUMS <= 0 {
			t.Errorf("place %v: own availability %.3f, rest of the process %.1f ms: want both counted", place, r.OwnAvailability, r.RestCPUMS)
		}
		// The progress threads served every exchange of the answered
		// run and none of the quiet one: their part of own is CPU spent.
		if r.OwnCPUMS-r.OwnComputeMS <= 0 {
			t.Errorf("place %v: own %.1f ms, of which the computing thread's %.1f ms: want the progress threads' part above 0", place, r.OwnCPUMS, r.OwnComputeMS)
		}
		// Rank 0 sends 1 MiB and rank 1 answers: both send the large
		// messages in place; rank 0 copies only its 8-byte count, eager.
		for side, s := range map[string]copySide{"a": c.A, "b": c.B} {
			if s.SentBytes < 1<<20 || s.SendGather+s.SendTransport > 64 || s.SendInPlace < s.SentBytes-64 {
				t.Errorf("place %v: side %s sent %+v, want every payload byte of the large messages sent in place", place, side, s)
			}
		}
		// Rank 1 receives at least the first message; every other
		// receive of either side is an answer or the next message.
		b := c.B
		switch {
		case b.RecvBytes < 1<<20:
			t.Errorf("place %v: rank 1 received %+v, want 1 MiB or more", place, b)
		case place && b.RecvPlaced == 0:
			t.Errorf("place %v: rank 1 received %+v, want payloads placed by the NIC", place, b)
		case place && r.Recovery.PullFramesRerequested == 0 && (c.A.RecvScatter > copiedAtMost(c.A) || b.RecvScatter > copiedAtMost(b)):
			t.Errorf("place %v: nothing was asked for again, yet the CPU copied %d and %d received bytes", place, c.A.RecvScatter, b.RecvScatter)
		case !place && (b.RecvPlaced != 0 || b.RecvPerByte < 1):
			t.Errorf("place %v: rank 1 received %+v, want every byte copied once by the CPU", place, b)
		}
	}
}

// copiedAtMost is what the CPU may copy of what a side received in
// TestNICOverlap with placement and nothing asked for again: the 8-byte
// count of rank 0's done message, eager, and of each 1 MiB message the
// last reply, shorter than a span (1454 bytes at most).
func copiedAtMost(s copySide) uint64 {
	return 64 + s.RecvBytes/(1<<20)*1454
}

// setupOf is the setup (the header's description) of a --json run's first
// row.
func setupOf(t *testing.T, out string) string {
	t.Helper()
	var rec struct {
		Setup string `json:"setup"`
	}
	line, _, _ := strings.Cut(out, "\n")
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("bad JSON line %q: %v", line, err)
	}
	return rec.Setup
}

// overlap over the NICs with --wait block sleeps them on MSI-X interrupts
// unless --nic-interrupts=false, and reports own availability from its
// locked progress thread; polling (--wait spin) it does neither, and
// pingpong with --wait block polls the NICs as it always did.
func TestNICOverlapWaits(t *testing.T) {
	// A --timeout past mxbench's default 2 m: on a loaded host the
	// emulated NIC's connect and copies can take longer than that.
	long := []string{"--timeout", "10m"}
	base := append([]string{"--transport", "nic", "--nic", "model", "--sizes", "64K", "--iterations", "2", "--warmup", "1", "--json"}, long...)
	for _, tc := range []struct {
		args      []string
		msix, own bool
	}{
		{[]string{"overlap", "--wait", "block"}, true, true},
		{[]string{"overlap", "--wait", "block", "--nic-interrupts=false"}, false, true},
		{[]string{"overlap", "--wait", "spin"}, false, false},
		{[]string{"overlap", "--wait", "spin", "--nic-interrupts"}, true, false},
		{[]string{"pingpong", "--wait", "block"}, false, false},
	} {
		name := strings.Join(tc.args, " ")
		out := runOK(t, append(tc.args, base...)...)
		if s := setupOf(t, out); strings.Contains(s, "MSI-X interrupts") != tc.msix {
			t.Errorf("%s: setup %q: MSI-X interrupts %v, want %v", name, s, !tc.msix, tc.msix)
		}
		if tc.args[0] != "overlap" {
			continue
		}
		rows := jsonRows(t, out)
		if len(rows) != 2 || rows[1].Kind != "availability" || rows[1].Availability <= 0 {
			t.Fatalf("%s: rows %+v, want EMP's timings and one availability", name, rows)
		}
		if r := rows[1]; (r.OwnAvailability > 0) != tc.own || (r.RestCPUMS > 0) != tc.own {
			t.Errorf("%s: own availability %.3f, rest of the process %.1f ms: want them reported %v", name, r.OwnAvailability, r.RestCPUMS, tc.own)
		}
	}
	// The table's own columns follow the run, so header and rows align.
	for _, wait := range []string{"block", "spin"} {
		out := runOK(t, "overlap", "--wait", wait, "--transport", "nic", "--nic", "model", "--sizes", "64K,128K", "--iterations", "2", "--warmup", "1", long[0], long[1])
		// Before the copies (after "|"): a row's words, one more than
		// the header's ("64 KiB"), one fewer with own ("cpu_ms
		// own/rest" heads one value).
		var head []string
		rows := 0
		for _, l := range strings.Split(out, "\n") {
			before, _, _ := strings.Cut(l, "|")
			switch f := strings.Fields(before); {
			case len(f) > 2 && f[0] == "size" && f[2] == "availability":
				head = f
			case head != nil && len(f) > 0 && !strings.HasPrefix(l, "#"):
				rows++
				want := len(head) + 1
				if slices.Contains(head, "own") {
					want--
				}
				if len(f) != want {
					t.Errorf("--wait %s: row %q has %d columns under header %q", wait, l, len(f), head)
				}
			}
		}
		if hasOwn := slices.Contains(head, "own"); rows != 2 || hasOwn != (wait == "block") {
			t.Errorf("--wait %s: %d rows under %q: want 2, with own %v\n%s", wait, rows, head, wait == "block", out)
		}
	}
}

func TestNICUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong", "--transport", "nic"}, "needs --nic"},
		{[]string{"pingpong", "--transport", "nic", "--nic", "0000:00:01.0"}, "want two PCI addresses"},
		{[]string{"pingpong", "--transport", "nic", "--nic", "0000:00:01.0,0000:00:01.0"}, "twice"},
		{[]string{"pingpong", "--transport", "nic", "--nic", "00:01.0,zz"}, "bad address"},
		{[]string{"pingpong", "--transport", "udp", "--nic", "model"}, "need --transport nic"},
		{[]string{"pingpong", "--transport", "nic", "--nic", "model", "--peer", "h:1"}, "nic runs both sides in this process"},
		{[]string{"overlap", "--transport", "nic"}, "needs --nic"},
		{[]string{"overlap", "--transport", "udp", "--nic-place"}, "need --transport nic"},
		{[]string{"overlap", "--transport", "nic", "--nic", "model", "--procs", "2"}, "drop --transport"},
		{[]string{"overlap", "--nic", "model"}, "need --transport nic"},
		{[]string{"stream", "--transport", "loopback", "--nic-mtu", "9000"}, "need --transport nic"},
		{[]string{"stream", "--transport", "loopback", "--nic-interrupts=false"}, "need --transport nic"},
		{[]string{"stream", "--transport", "nic", "--nic", "model-82599", "--nic-mtu", "9001"}, "want 1500..9000"},
		{[]string{"stream", "--transport", "nic", "--nic", "model-82599", "--nic-mtu", "1400"}, "want 1500..9000"},
		{[]string{"stream", "--transport", "nic", "--nic", "model", "--nic-mtu", "9000"}, "82574L driver takes 1500-byte frames only"},
	} {
		var out, errb bytes.Buffer
		err := run(&out, &errb, tc.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mxbench %v: error %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}
