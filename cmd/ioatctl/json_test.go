package main

import (
	"os"
	"slices"
	"testing"

	"github.com/gomx-dev/gomx/internal/cli"
)

// Every subcommand's --json output matches its schema in docs/json.md:
// nothing printed undocumented, nothing documented missing.
func TestJSONSchemas(t *testing.T) {
	doc, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envSysfsRoot, buildSysfs(t))
	for _, tc := range []struct {
		schema string
		args   []string
	}{
		{"ioatctl.list/2", []string{"list", "--json"}},
		{"ioatctl.copy/1", []string{"copy", "--device", "emulated", "--sizes", "4K,64K", "--iterations", "50", "--memory", "8M", "--verify", "--json"}},
		{"ioatctl.copy/1", []string{"copy", "--device", "emulated", "--hot", "--size", "4K", "--iterations", "50", "--json"}},
		{"ioatctl.verify/1", []string{"verify", "--device", "emulated", "--channels", "2", "--iterations", "50", "--json"}},
		{"ioatctl.overlap/1", []string{"overlap", "--device", "emulated", "--sizes", "4K", "--iterations", "2", "--json"}},
	} {
		r := ioatctl(t, tc.args...)
		if r.err != nil {
			t.Fatalf("%q: %v", tc.args, r.err)
		}
		seen, errs := cli.CheckJSONLines(doc, []byte(r.stdout))
		for _, err := range errs {
			t.Errorf("%q: %v", tc.args, err)
		}
		if !slices.Equal(seen, []string{tc.schema}) {
			t.Errorf("%q: schemas %v, want %s", tc.args, seen, tc.schema)
		}
	}
}
