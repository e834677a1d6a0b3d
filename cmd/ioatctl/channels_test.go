package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// TestVerifyStreamPerChannel: verify on a function with four channels
// runs four streams, one per channel, each counted and named on its own,
// and the header counts channels, not functions; with interrupts too,
// each channel sleeping on its own vector.
func TestVerifyStreamPerChannel(t *testing.T) {
	for _, irq := range []bool{false, true} {
		args := []string{"verify", "--device", "emulated", "--channels", "4", "--chancnt", "4", "--iterations", "40", "--seed", "3", "--json"}
		if irq {
			args = append(args, "--interrupts")
		}
		r := ioatctl(t, args...)
		if r.err != nil {
			t.Fatalf("%q: %v\n%s%s", args, r.err, r.stdout, r.stderr)
		}
		rows := jsonLines(t, r.stdout)
		if len(rows) != 4 {
			t.Fatalf("%q: %d JSON lines, want one per channel of the function:\n%s", args, len(rows), r.stdout)
		}
		for i, row := range rows {
			if want := fmt.Sprintf("emulated/%d", i); row["channel"] != want {
				t.Errorf("row %d: channel %v, want %s", i, row["channel"], want)
			}
			if n := row["copies_ok"].(float64) + row["fills_ok"].(float64); n != 40 {
				t.Errorf("%v: %v operations verified, want 40", row["channel"], n)
			}
		}
	}
	r := ioatctl(t, "verify", "--device", "emulated", "--channels", "4", "--chancnt", "2", "--iterations", "20")
	if r.err != nil {
		t.Fatalf("verify: %v\n%s", r.err, r.stdout)
	}
	if !strings.Contains(r.stdout, "emulated CBDMA (4 channels in 2 functions") || strings.Count(r.stdout, "emulated/") != 4 {
		t.Errorf("verify over two 2-channel functions does not count and name 4 channels:\n%s", r.stdout)
	}
	r = ioatctl(t, "copy", "--device", "emulated", "--channels", "4", "--chancnt", "4", "--size", "64K", "--iterations", "20", "--json")
	if r.err != nil {
		t.Fatalf("copy: %v\n%s", r.err, r.stderr)
	}
	if rows := jsonLines(t, r.stdout); rows[0]["channels"] != 4.0 {
		t.Errorf("copy on a 4-channel function reports %v channels, want 4", rows[0]["channels"])
	}
}

func TestChancntUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--device", "emulated", "--channels", "3", "--chancnt", "2"}, "not a multiple of --chancnt 2"},
		{[]string{"verify", "--device", "emulated", "--chancnt", "5"}, "--chancnt 5: want 1 to 4"},
		{[]string{"copy", "--device", "emulated", "--channels", "2", "--chancnt", "2", "--cbver", "3.4"}, "a CB 3.4 function has one channel"},
		{[]string{"copy", "--device", "0000:00:04.0", "--chancnt", "2"}, "--chancnt apply to the emulated engine only"},
	} {
		r := ioatctl(t, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.err.Error(), tc.want) {
			t.Errorf("%q: exit %d, %v; want usage error mentioning %q", tc.args, r.code, r.err, tc.want)
		}
	}
}

// TestChannelNames: a real channel is named by its function's address,
// with /n when the function has several channels.
func TestChannelNames(t *testing.T) {
	a := pci.Address{Bus: 0x80, Device: 4, Function: 0}
	if got := channelName(ioat.Info{Addr: a, Index: 0, Channels: 1}); got != "0000:80:04.0" {
		t.Errorf("one-channel function: %q", got)
	}
	if got := channelName(ioat.Info{Addr: a, Index: 2, Channels: 4}); got != "0000:80:04.0/2" {
		t.Errorf("channel 2 of four: %q", got)
	}
}

// TestListShowsChannels: list reads CHANCNT with CBVER and shows one row
// per channel, and counts channels apart from functions.
func TestListShowsChannels(t *testing.T) {
	p, err := emulated.NewCBDMA(emulated.CBDMAOptions{Channels: 1, ChannelsPerFunction: 4, Version: hw.Ver32})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pr, err := probeRegs(p.Devices()[0])
	if err != nil {
		t.Fatal(err)
	}
	if pr.cbver != "3.2" || pr.channels != 4 {
		t.Fatalf("probe: %+v, want CBVER 3.2 and 4 channels", pr)
	}
	entries := []listEntry{
		{Address: "0000:00:04.0", Device: "0e20", CBVER: pr.cbver, Channels: pr.channels, Driver: "vfio-pci", IOMMUGroup: 3},
		{Address: "0000:00:04.1", Device: "0e21", Driver: "ioatdma", IOMMUGroup: 4},
	}
	var out bytes.Buffer
	if bound := listTable(&out, entries); bound != 1 {
		t.Errorf("%d bound, want 1", bound)
	}
	for _, row := range []string{"0000:00:04.0/0 ", "0000:00:04.0/3 ", "0000:00:04.1 "} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q:\n%s", row, out.String())
		}
	}
	if got := channelCount(entries); got != "at least 5 channels (CHANCNT not read on 1 function)" {
		t.Errorf("channel count %q", got)
	}
	if got := channelCount(entries[:1]); got != "4 channels" {
		t.Errorf("channel count %q", got)
	}
}

// TestEngineHints: the advice added to an engine that failed to open
// answers the failure's cause: a DMA fault is an IOMMU mapping or a bad
// descriptor, never "another process"; a busy channel is.
func TestEngineHints(t *testing.T) {
	vfioBackend := &backend{}
	fault := fmt.Errorf("start-up null descriptor failed: %w", &ioat.ChanError{Op: "null", ChanErr: hw.ErrReadData})
	for _, tc := range []struct {
		name     string
		err      error
		want     string
		mustNot  string
		emulated bool
	}{
		{"DMA fault", fault, "not mapped in the VFIO container's DMA domain", "another process", false},
		{"busy", fmt.Errorf("claim: %w", pci.ErrBusy), "another process", "IOMMU", false},
		{"descriptor", &ioat.ChanError{Op: "copy", ChanErr: hw.ErrChainAddr}, "refused a descriptor", "another process", false},
		{"timeout", fmt.Errorf("reset: %w", ioat.ErrTimeout), "did not respond in time", "another process", false},
		{"other", errors.New("something else"), "ioatctl setup", "another process", false},
		{"emulated", fault, "", "another process", true},
	} {
		b := vfioBackend
		if tc.emulated {
			b = &backend{emulated: true}
		}
		got := engineHint(tc.err, b).Error()
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.mustNot) {
			t.Errorf("%s: %q; want it to say %q and not %q", tc.name, got, tc.want, tc.mustNot)
		}
		if !errors.Is(engineHint(tc.err, b), tc.err) {
			t.Errorf("%s: the hint lost the error", tc.name)
		}
	}
}

// TestDriverWarnings: the driver's warnings (CHANERR bits that will not
// clear) reach stderr as one line, without a timestamp.
func TestDriverWarnings(t *testing.T) {
	var out, errb bytes.Buffer
	e := newEnv(&out, &errb)
	e.logger().Warn("ioat: CHANERR bits still read set after being cleared", "chanerr", "0x100 (read data)")
	got := errb.String()
	if out.Len() != 0 || strings.Count(got, "\n") != 1 || strings.Contains(got, "time=") || !strings.Contains(got, "level=WARN") {
		t.Errorf("warning on stderr %q (stdout %q)", got, out.String())
	}
}
