package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/hack/peers/alltoall"
)

// TestBothSidesWarmUpAlike: for every job the MPI program's WARMUP
// argument and mxbench's --warmup carry the same rounds, and both run the
// same sizes, whether the warm-up goes by size or -warmup gives one count.
func TestBothSidesWarmUpAlike(t *testing.T) {
	sizes := []int{8, 4 << 10, 64 << 10, 1 << 20}
	for _, warmup := range []int{-1, 0, 10, 5000} {
		jobs := plan(sizes, 8, warmup)
		var all []int
		for _, j := range jobs {
			o := ompiArgs("/tmp/alltoall", 8, j)
			i := slices.Index(o, "/tmp/alltoall")
			if i < 0 || i+2 > len(o) {
				t.Fatalf("mpirun's arguments %q lack the program and its warm-up", o)
			}
			ow, _ := strconv.Atoi(o[i+1])
			var osz []int
			for _, a := range o[i+2:] {
				s, _ := strconv.Atoi(a)
				osz = append(osz, s)
			}
			m := mxArgs(8, j, "block")
			if slices.Contains(m, "--timeout") {
				t.Errorf("mxbench's arguments %q give --timeout: a stuck job would wait for the whole run's bound, not mxbench's minutes", m)
			}
			w := slices.Index(m, "--warmup")
			z := slices.Index(m, "--sizes")
			if w < 0 || z < 0 {
				t.Fatalf("mxbench's arguments %q lack --warmup or --sizes", m)
			}
			mw, _ := strconv.Atoi(m[w+1])
			var msz []int
			for _, a := range strings.Split(m[z+1], ",") {
				s, _ := strconv.Atoi(a)
				msz = append(msz, s)
			}
			if ow != mw || !slices.Equal(osz, msz) {
				t.Errorf("-warmup %d: Open MPI warms up %d rounds for %v, mxbench %d for %v", warmup, ow, osz, mw, msz)
			}
			for _, s := range osz {
				want := warmup
				if warmup < 0 {
					want = alltoall.Warmup(s, 8)
				}
				if ow != want {
					t.Errorf("-warmup %d: size %d warms up %d rounds, want %d", warmup, s, ow, want)
				}
			}
			all = append(all, osz...)
		}
		if !slices.Equal(all, sizes) {
			t.Errorf("-warmup %d: the jobs run sizes %v, want %v", warmup, all, sizes)
		}
	}
}
