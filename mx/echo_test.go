package mx

import (
	"bytes"
	"context"
	"testing"
)

// echoStop is the match that ends echoLoop.
const echoStop = 1 << 63

// echoSizes sends a message of each size to the echo peer at addr (match i
// for size i) and checks that the same bytes come back.
func echoSizes(t testing.TB, ctx context.Context, e *Endpoint, addr Addr, sizes []int) {
	t.Helper()
	for i, size := range sizes {
		msg := pattern(size, uint64(i))
		buf := make([]byte, size)
		r, _ := e.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
		s, err := e.ISend([][]byte{msg}, addr, uint64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", size, err)
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatalf("echo %d: %v", size, err)
		}
		if !bytes.Equal(buf, msg) {
			t.Fatalf("echo of %d bytes differs", size)
		}
	}
}

// echoLoop, in a child process, sends every message (up to 4 MiB+1) back
// to its source with its match, until a message with match echoStop.
func echoLoop(ctx context.Context, e *Endpoint) error {
	buf := make([]byte, 4<<20+1)
	for {
		r, err := e.IRecv([][]byte{buf}, 0, 0, nil)
		if err != nil {
			return err
		}
		st, err := r.Wait(ctx)
		if err != nil {
			return err
		}
		if st.Match == echoStop {
			return nil
		}
		s, err := e.ISend([][]byte{buf[:st.XferLength]}, st.Source, st.Match, nil)
		if err != nil {
			return err
		}
		if _, err := s.Wait(ctx); err != nil {
			return err
		}
	}
}
