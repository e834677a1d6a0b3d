package main

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/cli"
)

// pingpong's and stream's --json output match their schemas in
// docs/json.md.
func TestJSONSchemas(t *testing.T) {
	doc, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"pingpong", "stream"} {
		out := runOK(t, cmd, "--sizes", "0,1K", "--iterations", "20", "--wait", "block", "--json")
		seen, errs := cli.CheckJSONLines(doc, []byte(out))
		for _, err := range errs {
			t.Errorf("%s: %v", cmd, err)
		}
		if !slices.Equal(seen, []string{"mxbench." + cmd + "/1"}) {
			t.Errorf("%s: schemas %v", cmd, seen)
		}
	}
	// The optional faults object, over a wrapped wire.
	out := runOK(t, "pingpong", "--transport", "udp", "--loss", "0.01", "--seed", "3", "--sizes", "8", "--iterations", "20", "--wait", "block", "--json")
	if !strings.Contains(out, `"faults":{`) {
		t.Fatalf("no faults object with --loss:\n%s", out)
	}
	if _, errs := cli.CheckJSONLines(doc, []byte(out)); len(errs) > 0 {
		t.Errorf("pingpong --loss: %v", errs)
	}
	// Runs among processes add their fields, and alltoall and overlap
	// have schemas of their own.
	for _, args := range [][]string{
		{"pingpong", "--procs", "2", "--strategy", "cma"},
		{"pingpong", "--procs", "2", "--strategy", "engine", "--engine-cpu", strconv.Itoa(usableCPU(t))},
		{"stream", "--procs", "2"},
		{"alltoall", "--procs", "2"},
		{"overlap"},
	} {
		out := runJob(t, append(args, "--sizes", "8,64K", "--iterations", "10", "--wait", "block", "--json")...)
		seen, errs := cli.CheckJSONLines(doc, []byte(out))
		for _, err := range errs {
			t.Errorf("%v: %v", args, err)
		}
		if !slices.Equal(seen, []string{"mxbench." + args[0] + "/1"}) {
			t.Errorf("%v: schemas %v", args, seen)
		}
	}
}
