package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
)

// overlap in this process (--transport): ranks 0 and 1 are the two boards
// of a pair (pair.go) that pingpong and stream open the same way, over any
// wire they take, among them the nic pair (--nic model-82599 --nic-place,
// where the NICs read large messages from the sender's buffer and write
// them into the receiver's). Each rank runs in a goroutine of its own and
// runs overlap's code unchanged: its world has the two ranks, on board 0,
// and its barriers and broadcasts go through mx over the same wire as the
// measured messages, as a job's do.
//
// What changes against a job is who shares rank 0's CPUs: rank 1, both
// boards' progress goroutines and, over an emulated NIC, the model's DMA
// are threads of this process, run by the same scheduler as rank 0's
// computation. The availability then counts everything the pair costs the
// host's processors while rank 0 computes, which is the point of comparing
// a path that copies with one that does not. With --wait block the boards
// and rank 1 sleep between frames; with spin they poll, on the CPUs rank 0
// computes on.
//
// The rows carry both sides' copies per payload byte (copies.a: rank 0,
// which starts each exchange; copies.b: rank 1) and the recovery counters
// over each availability run, as pingpong's rows do. With --wait block
// they carry own_availability too: rank 0's board runs its progress
// goroutine on a thread of its own (flags.go, ownThread), whose CPU clock
// availability reads beside the computing thread's (summed over side a's
// boards, should a side ever have more than one).
func overlapLocal(ctx context.Context, f *benchFlags, p *pair, sizes []int, rep reporter) error {
	progressCPU, err := f.chooseProgressCPU("overlap")
	if err != nil {
		return err
	}
	rep.header(fmt.Sprintf("mxbench overlap: %s, ranks 0 and 1 as two boards of this process, %s%s",
		p.what, f.describeWait(), progressNote(progressCPU)))
	worlds := localWorlds(p)
	worlds[0].progressCPU = progressCPU
	if f.ownThread {
		worlds[0].own = p.aBoards
	}
	// A rank that fails cancels the other's waits, which would otherwise
	// last until --timeout for a barrier that cannot come.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	for rank, w := range worlds {
		go func() {
			if f.spin() {
				pin(rank) // never unlocked: the pinned thread retires with the goroutine
			}
			r := rep
			if rank != 0 {
				r = silent{}
			}
			err := w.overlap(ctx, f, 0, "", sizes, r)
			if err != nil {
				cancel()
				err = fmt.Errorf("rank %d: %w", rank, err)
			}
			errs <- err
		}()
	}
	// The first failure is the cause; the other rank's is its cancelled
	// wait.
	var first error
	for range worlds {
		if err := <-errs; err != nil && (first == nil || errors.Is(first, context.Canceled) && !errors.Is(err, context.Canceled)) {
			first = err
		}
	}
	return first
}

// localWorlds is the world of each of ranks 0 and 1 when they are the two
// boards of pair p, on board 0.
func localWorlds(p *pair) [2]*world {
	nics := []transport.NICID{p.a.Addr().NIC, p.b.Addr().NIC}
	job := func(rank int) launch.Job {
		return launch.Job{Rank: rank, Size: 2, Launcher: "this process", OneNode: true}
	}
	return [2]*world{
		{job: job(0), boards: []*mx.Board{p.a.Board()}, eps: []*mx.Endpoint{p.a}, peers: [][]mx.Addr{{{}, p.aAddr}},
			nics: [][]transport.NICID{nics}, inProcess: true, local: p},
		{job: job(1), boards: []*mx.Board{p.b.Board()}, eps: []*mx.Endpoint{p.b}, peers: [][]mx.Addr{{p.bAddr, {}}},
			nics: [][]transport.NICID{nics}, inProcess: true},
	}
}
