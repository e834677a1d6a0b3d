//go:build cabi && cgo

package main

import (
	"context"
	"runtime"
	"testing"

	"github.com/gomx-dev/gomx/cmd/internal/mxenv"
	"github.com/gomx-dev/gomx/mx"
	"golang.org/x/sys/unix"
)

// BenchmarkIterationGo is the Go reference for the last figure `mxtest
// crossing` prints: the same ping-pong iteration within one endpoint (a
// receive posted, an 8-byte send to the endpoint's own connected address,
// a wait for each), made by a Go program against package mx on a board
// opened as the library opens its boards (mxenv, SleepOnSources). The
// difference between the two is what the library's four calls add: four
// crossings and the library's own wrapping of each call. It reports the
// calling thread's CPU time per iteration, as mxtest does; run both on
// the same CPU, alternately (docs/c-api.md, "Where a ping-pong's time
// goes").
func BenchmarkIterationGo(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cfg, err := mxenv.Parse(func(string) (string, bool) { return "", false })
	if err != nil {
		b.Fatal(err)
	}
	cfg.Options.SleepOnSources = true
	names := mx.NewNames()
	bs, err := cfg.OpenBoards(names)
	if err != nil {
		b.Fatal(err)
	}
	defer mxenv.CloseBoards(bs)
	ep, err := bs[0].OpenEndpoint(mx.AnyEndpoint, 0x1234)
	if err != nil {
		b.Fatal(err)
	}
	defer ep.Close()
	a := ep.Addr()
	ctx := context.Background()
	self, err := ep.Connect(ctx, a.NIC, a.Endpoint, 0x1234)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 8)
	rsegs, ssegs := [][]byte{buf}, [][]byte{buf}
	one := func() {
		r, err := ep.IRecv(rsegs, 0xF00D, ^uint64(0), nil)
		if err != nil {
			b.Fatal(err)
		}
		s, err := ep.ISend(ssegs, self, 0xF00D, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for range 1000 {
		one()
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := threadCPU()
	for range b.N {
		one()
	}
	cpu := threadCPU() - c0
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/iter")
}

// threadCPU is the calling thread's CPU time in nanoseconds.
func threadCPU() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}
