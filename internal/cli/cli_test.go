package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
)

func TestCode(t *testing.T) {
	u := Usagef("mxbench", "pingpong", "--window %d: want at least 1", 0)
	if !strings.Contains(u.Error(), "run `mxbench pingpong -h` for its flags") {
		t.Errorf("message %q lacks the hint", u)
	}
	if !strings.Contains(Usagef("ioatctl", "", "bad").Error(), "run `ioatctl help`") {
		t.Error("top-level hint missing")
	}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK}, {flag.ErrHelp, ExitOK}, {u, ExitUsage},
		{fmt.Errorf("wrapped: %w", u), ExitUsage}, {errors.New("device gone"), ExitFailure},
	} {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("Code(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
