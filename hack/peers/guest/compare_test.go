package main

import (
	"slices"
	"testing"
)

// TestCompareOrder checks that over as many runs as there are builds each
// mxbench build goes first once, and how their rows are marked.
func TestCompareOrder(t *testing.T) {
	if got := compareOrder(nil, 3); !slices.Equal(got, []build{{"/bin/mxbench", ""}}) {
		t.Errorf("no build to compare with: %v", got)
	}
	if got := compareOrder([]string{"/var/tmp/old"}, 0); !slices.Equal(got, []build{{"/var/tmp/old", " (compare)"}, {"/bin/mxbench", ""}}) {
		t.Errorf("one build to compare with, run 0: %v", got)
	}
	compare := []string{"/var/tmp/a", "/var/tmp/b"}
	first := map[string]int{}
	for i := range 3 {
		got := compareOrder(compare, i)
		if len(got) != 3 {
			t.Fatalf("run %d: %v, want three builds", i, got)
		}
		first[got[0].bin]++
		for _, b := range got {
			if want := map[string]string{"/var/tmp/a": " (a)", "/var/tmp/b": " (b)", "/bin/mxbench": ""}[b.bin]; b.suffix != want {
				t.Errorf("run %d: %s marked %q, want %q", i, b.bin, b.suffix, want)
			}
		}
	}
	for _, b := range []string{"/var/tmp/a", "/var/tmp/b", "/bin/mxbench"} {
		if first[b] != 1 {
			t.Errorf("%s went first %d times in 3 runs, want once", b, first[b])
		}
	}
}
