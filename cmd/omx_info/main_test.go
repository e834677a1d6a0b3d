package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestRunListsBoards(t *testing.T) {
	t.Setenv("GOMX_BOARDS", "udp:127.0.0.1:0,udp:127.0.0.1:0")
	t.Setenv("OMX_DISABLE_SHARED", "1")
	var out bytes.Buffer
	if err := run(&out, []string{"-v"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"found 2 boards", "board #0 name ", "board #1 name ", "shared memory off (OMX_DISABLE_SHARED)", "errors: fatal"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunBadEnvironment(t *testing.T) {
	t.Setenv("GOMX_BOARDS", "eth0")
	err := run(&bytes.Buffer{}, nil)
	if err == nil || !strings.Contains(err.Error(), "GOMX_BOARDS") {
		t.Fatalf("error %v, want one naming GOMX_BOARDS", err)
	}
}

func TestRunHelp(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, []string{"-h"}); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "GOMX_BOARDS") {
		t.Fatalf("-h: %v\n%s", err, out.String())
	}
}
