package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestUSBPingPongFakeVerified(t *testing.T) {
	for _, dev := range []string{"fake", "fake-ncm"} {
		out := runOK(t, "pingpong", "--transport", "usb", "--usb", dev, "--wait", "block", "--sizes", "0,32,1K,40K", "--iterations", "20", "--warmup", "2", "--verify", "--json")
		rows := jsonRows(t, out)
		if len(rows) != 4 {
			t.Fatalf("--usb %s: %d rows, want 4:\n%s", dev, len(rows), out)
		}
		for _, r := range rows {
			if r.Errors != 0 || r.Iterations != 20 || r.LatencyUS <= 0 {
				t.Errorf("--usb %s: row %+v: want 20 iterations, no errors, a latency", dev, r)
			}
		}
	}
}

func TestUSBUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong", "--transport", "usb"}, "needs --usb"},
		{[]string{"pingpong", "--transport", "usb", "--usb", "3:7"}, "want two USB adapters"},
		{[]string{"pingpong", "--transport", "usb", "--usb", "3:7,3:7"}, "twice"},
		{[]string{"pingpong", "--transport", "usb", "--usb", "3:7,zz"}, "BUS:ADDR"},
		{[]string{"pingpong", "--transport", "usb", "--usb", "0000:00:01.0,0000:00:02.0"}, "--transport nic --nic"},
		{[]string{"pingpong", "--transport", "usb", "--usb", "0525:a4a2,0000:00:2.0"}, "device must be 2 hex digits"},
		{[]string{"pingpong", "--transport", "usb", "--usb", "0525:a4a2,0525:a4a2"}, "twice"},
		{[]string{"pingpong", "--transport", "udp", "--usb", "fake"}, "needs --transport usb"},
		{[]string{"pingpong", "--transport", "usb", "--usb", "fake", "--peer", "h:1"}, "usb runs both sides in this process"},
	} {
		var out, errb bytes.Buffer
		err := run(&out, &errb, tc.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mxbench %v: error %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}
