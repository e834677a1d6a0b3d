package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/netns"
)

// Queued boards over the emulated 82599 pair, each side's goroutine on
// the CPU of its endpoint's queue: every byte arrives, and the header says
// how the queues are placed and that their threads sleep on unmoderated
// interrupts, or poll with --nic-interrupts=false.
func TestQueuedPingPongModel(t *testing.T) {
	for _, c := range []struct{ cmd, irq, want string }{
		{"pingpong", "", "unmoderated MSI-X interrupts"},
		{"stream", "", "unmoderated MSI-X interrupts"},
		{"pingpong", "--nic-interrupts=false", ""},
	} {
		args := []string{c.cmd, "--transport", "nic", "--nic", "model-82599", "--queues", "2", "--bind-app",
			"--sizes", "0,32,40K", "--iterations", "20", "--warmup", "2", "--verify", "--baseline=false"}
		if c.irq != "" {
			args = append(args, c.irq)
		}
		out := runOK(t, args...)
		cmd := strings.TrimSpace(c.cmd + " " + c.irq)
		if !strings.Contains(out, "queued boards of 2 queues") || !strings.Contains(out, "bound to one CPU") {
			t.Errorf("%s: the header does not say the boards are queued and bound:\n%s", cmd, out)
		}
		if got := strings.Contains(out, "interrupts"); got != (c.want != "") || c.want != "" && !strings.Contains(out, c.want) {
			t.Errorf("%s: the header does not say %q (interrupts named: %v):\n%s", cmd, c.want, got, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 5 && (f[1] == "B" || f[1] == "KiB") && f[5] != "0" {
				t.Errorf("%s: errors in row %q", cmd, l)
			}
		}
	}
}

// The same over AF_XDP queues on the veth pair mxbench makes.
func TestQueuedPingPongXDP(t *testing.T) {
	if why := netns.Missing(); why != "" {
		if os.Getenv("GOMX_REQUIRE_XDP") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	rows := jsonRows(t, runOK(t, "pingpong", "--transport", "xdp", "--queues", "2", "--bind-app", "--sizes", "0,8,40K",
		"--iterations", "30", "--verify", "--json", "--wait", "block", "--baseline=false"))
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	for _, r := range rows {
		if r.Errors != 0 || r.Iterations != 30 {
			t.Errorf("row %+v: want 30 iterations, no errors", r)
		}
	}
}

func TestQueuesUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong", "--queues", "-1"}, "want 1 to 64"},
		{[]string{"pingpong", "--transport", "nic", "--nic", "model-82599", "--queues", "65"}, "want 1 to 64"},
		{[]string{"pingpong", "--transport", "loopback", "--queues", "2"}, "--transport nic"},
		{[]string{"stream", "--transport", "nic", "--nic", "model-82599", "--bind-app"}, "add --queues N"},
		{[]string{"pingpong", "--transport", "nic", "--nic", "model-82599", "--queues", "2", "--loss", "0.01"}, "drop them or --queues"},
	} {
		var out, errb bytes.Buffer
		err := run(&out, &errb, tc.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mxbench %v: error %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
	// More queues than the NIC has: the error says so and what to do.
	var out, errb bytes.Buffer
	err := run(&out, &errb, []string{"pingpong", "--transport", "nic", "--nic", "model", "--queues", "4", "--sizes", "8", "--iterations", "1"})
	if err == nil || !strings.Contains(err.Error(), "lower --queues") {
		t.Errorf("4 queues of an 82574: %v, want an error saying to lower --queues", err)
	}
}
