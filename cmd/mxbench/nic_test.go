package main

import (
	"bytes"
	"errors"
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

func TestNICPingPong82599ModelVerified(t *testing.T) {
	out := runOK(t, "pingpong", "--transport", "nic", "--nic", "model-82599", "--sizes", "0,32,1K,40K", "--iterations", "20", "--warmup", "2", "--verify", "--json")
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
	} {
		var out, errb bytes.Buffer
		err := run(&out, &errb, tc.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mxbench %v: error %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}
