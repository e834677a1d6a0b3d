package mx

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/shm"
)

// BenchmarkIntranode measures ping-pong between two endpoints of one host
// for each intra-node path: "local" (two boards of one process, the
// in-process shortcut: one copy, no protocol) and "shm-procs" (two processes,
// the full protocol through shared-memory rings; large messages are pulled
// through the rings). It reports the one-way latency (us/oneway) and the
// ping-pong bandwidth (MB/s = size / one-way time).
func BenchmarkIntranode(b *testing.B) {
	for _, path := range []string{"local", "shm-procs"} {
		for _, mode := range []string{"blocking", "busypoll"} {
			for _, size := range []int{8, 4 << 20} {
				b.Run(fmt.Sprintf("%s/%s/%dB", path, mode, size), func(b *testing.B) {
					opts := DefaultBoardOptions()
					opts.BusyPoll = mode == "busypoll"
					if path == "local" {
						pingPong(b, transportFactory{name: "local", new: newLocalWire}, opts, size)
						return
					}
					shmPingPong(b, opts, size)
				})
			}
		}
	}
}

// shmPingPong runs the ping-pong against an echo server in a child process.
func shmPingPong(b *testing.B, opts BoardOptions, size int) {
	dir := shmDir(b)
	arg := dir + " 98"
	if opts.BusyPoll {
		arg += " busy"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestShmProcesses$", "-test.count=1", "-test.bench=^$")
	cmd.Env = append(os.Environ(), shmChildEnv+"="+arg)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "ready" {
		b.Fatal("child did not start")
	}
	tr, err := shm.Open(shm.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	bd, err := NewBoard(tr, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer bd.Close()
	e, err := bd.OpenEndpoint(0, testKey)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	addr, err := e.Connect(ctx, shm.NICBase|98, 0, testKey)
	if err != nil {
		b.Fatal(err)
	}
	sbuf, rbuf := make([]byte, size), make([]byte, size)
	round := func() {
		r, err := e.IRecv([][]byte{rbuf}, 0, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		s, err := e.ISend([][]byte{sbuf}, addr, 0, nil)
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
	for range 10 {
		round()
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	oneway := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 2
	b.ReportMetric(oneway/1e3, "us/oneway")
	b.ReportMetric(float64(size)/oneway*1e3, "MB/s")
	s, _ := e.ISend(nil, addr, 1<<63, nil) // not echoed: the child's loop ends on a kill
	s.Forget()
}
