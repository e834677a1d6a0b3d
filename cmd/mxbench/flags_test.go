package main

import (
	"bytes"
	"errors"
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// honoured is, per subcommand, every flag it reads: the flags its -h lists,
// and the only ones it accepts.
var honoured = func() map[string][]string {
	common := []string{"aligned", "bind", "counters", "end", "engine", "engine-cpu", "iterations", "json", "key", "listen",
		"multiplier", "no-checksum", "no-zero-copy", "plot", "procs", "rndv-threshold", "sizes", "start", "strategy", "timeout", "verify", "wait", "warmup", "yield"}
	pair := []string{"baseline", "corrupt", "cpuprofile", "dup", "iface", "loss", "nic", "nic-interrupts", "nic-mtu", "nic-place", "nic-sync-dma", "peer", "peer-iface",
		"remote-endpoint", "reorder", "seed", "settle", "trace", "transport", "usb", "xdp-mode", "xdp-udp", "queues", "bind-app"}
	with := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		slices.Sort(out)
		return out
	}
	return map[string][]string{
		"pingpong": with(common, pair, []string{"interleave", "sync", "trials", "unidirectional"}),
		"stream":   with(common, pair, []string{"sync", "window"}),
		"alltoall": with(common, []string{"sync", "schedule"}),
		"overlap":  with(common, []string{"progress-cpu", "transport", "nic", "nic-interrupts", "nic-mtu", "nic-place", "nic-sync-dma", "iface", "peer-iface", "xdp-mode", "xdp-udp", "usb"}),
		"serve":    with([]string{"endpoint", "key", "listen", "once", "timeout", "wait"}),
	}
}()

// TestFlagsPerSubcommand: each subcommand's -h lists exactly the flags it
// honours, and a flag of another subcommand is refused with a usage error
// that names both.
func TestFlagsPerSubcommand(t *testing.T) {
	listed := regexp.MustCompile(`(?m)^  --([a-z0-9-]+)`)
	all := map[string]bool{}
	for _, fl := range honoured {
		for _, f := range fl {
			all[f] = true
		}
	}
	for _, cmd := range commandOrder {
		want := honoured[cmd]
		var out bytes.Buffer
		if err := run(&out, &out, []string{cmd, "-h"}); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: %v", cmd, err)
		}
		var got []string
		for _, m := range listed.FindAllStringSubmatch(out.String(), -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s -h lists %v\nwant %v", cmd, got, want)
		}
		for f := range all {
			if slices.Contains(want, f) {
				continue
			}
			err := run(&bytes.Buffer{}, &bytes.Buffer{}, []string{cmd, "--" + f, "1"})
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), cmd+" has no flag --"+f+": only ") {
				t.Errorf("%s --%s: %v, want a usage error saying %s has no such flag and who has it", cmd, f, err, cmd)
			}
		}
	}
	err := run(&bytes.Buffer{}, &bytes.Buffer{}, []string{"alltoall", "--frobnicate"})
	if err == nil || !strings.Contains(err.Error(), "alltoall has no flag --frobnicate (run `mxbench alltoall -h`") {
		t.Errorf("alltoall --frobnicate: %v", err)
	}
}
