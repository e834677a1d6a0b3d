package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport/shm"
)

// alltoallNotes is the help of alltoall.
const alltoallNotes = `IMB's Alltoall among the ranks of a job: in every round each rank sends
SIZE bytes to every other rank and receives SIZE bytes from each (posted
non-blocking, then waited for together). Per size, after a barrier, every
rank times its rounds; t_avg_us is the mean over ranks of each rank's mean
time per round, t_min_us and t_max_us the fastest and slowest rank's, as
IMB reports them. MB/s is the bytes one rank sends per round, (N-1) x SIZE,
over t_avg. strategy says how rank 0's large messages moved (eager, rings,
cma, or the name mx gives a strategy; see pingpong -h).

The ranks come from mpirun, srun or a PMI launcher (mpirun -np 4 mxbench
alltoall), or --procs N starts N processes of this host. Processes on one
host reach each other through shared memory, which mx picks by itself.
Only rank 0 prints; another rank prints one line if it fails.
`

// shmFootprint reads the shared memory b's host path maps, owns, and its
// rings both ways, from the transport's own counters (0 without one).
func shmFootprint(b *mx.Board) (mapped, owned int64, rings int) {
	for _, c := range b.TransportCounters() {
		switch c.Name {
		case shm.CounterMappedBytes:
			mapped = int64(c.Value)
		case shm.CounterOwnedBytes:
			owned = int64(c.Value)
		case shm.CounterRingsWritten, shm.CounterRingsRead:
			rings += int(c.Value)
		}
	}
	return mapped, owned, rings
}

// alltoall runs every size on board k.
func (w *world) alltoall(ctx context.Context, f *benchFlags, k int, strategy string, sizes []int, rep reporter) error {
	n := w.job.Size
	maxSize := slices.Max(sizes)
	sbuf := newBuffer(maxSize, f.aligned)
	sb := [][]byte{sbuf}
	if err := sharedBuffers(w.eps[k], strategy, sb); err != nil {
		return err
	}
	sbuf = sb[0]
	rbufs := make([][]byte, n)
	for r := range rbufs {
		if r != w.job.Rank {
			rbufs[r] = newBuffer(maxSize, f.aligned)
		}
	}
	ep := w.eps[k]
	reqs := make([]*mx.Request, 0, 2*n)
	round := func(ctx context.Context, size, i int) error {
		reqs = reqs[:0]
		for src := range n {
			if src == w.job.Rank {
				continue
			}
			r, err := ep.IRecv([][]byte{rbufs[src][:size]}, tagA2A|uint64(src), matchAll, nil)
			if err != nil {
				return err
			}
			reqs = append(reqs, r)
		}
		if f.verify {
			pattern(sbuf[:size], i*256+w.job.Rank)
		}
		for dst := range n {
			if dst == w.job.Rank {
				continue
			}
			var r *mx.Request
			var err error
			if f.sync {
				r, err = ep.ISSend([][]byte{sbuf[:size]}, w.peers[k][dst], tagA2A|uint64(w.job.Rank), nil)
			} else {
				r, err = ep.ISend([][]byte{sbuf[:size]}, w.peers[k][dst], tagA2A|uint64(w.job.Rank), nil)
			}
			if err != nil {
				return err
			}
			reqs = append(reqs, r)
		}
		for _, r := range reqs {
			st, err := r.Wait(ctx)
			if err != nil {
				return err
			}
			if st.Match&^0xff != tagA2A || int(st.Match&0xff) == w.job.Rank {
				continue // a send
			}
			src := int(st.Match & 0xff)
			if int(st.XferLength) != size {
				return fmt.Errorf("round %d: %d bytes from rank %d, want %d", i, st.XferLength, src, size)
			}
			if f.verify {
				if at := check(rbufs[src][:size], i*256+src); at >= 0 {
					return fmt.Errorf("round %d from rank %d, offset %d: %w", i, src, at, errVerify)
				}
			}
		}
		return nil
	}
	for _, size := range sizes {
		iters := f.iterationsFor(size * max(n-1, 1))
		sctx, cancel := context.WithTimeout(ctx, f.timeout)
		before := ep.Counters()
		for i := range f.warmup {
			if err := round(sctx, size, i); err != nil {
				cancel()
				return fmt.Errorf("alltoall of %s, warmup round %d: %w", units.Format(int64(size)), i, err)
			}
		}
		if err := w.barrier(sctx); err != nil {
			cancel()
			return err
		}
		start := time.Now()
		for i := range iters {
			if err := round(sctx, size, f.warmup+i); err != nil {
				cancel()
				return fmt.Errorf("alltoall of %s, round %d: %w", units.Format(int64(size)), i, err)
			}
		}
		perRound := time.Since(start).Seconds() * 1e6 / float64(max(iters, 1))
		m := strategyOf(countersSince(before, ep.Counters()), strategy, w.boards[k].HostPath(w.nics[k][(w.job.Rank+1)%n]), size)
		m.Mapped, m.Owned, m.Rings = shmFootprint(w.boards[k])
		times, err := w.gather(sctx, binary.BigEndian.AppendUint64(nil, math.Float64bits(perRound)))
		if err == nil {
			var all []moved
			if all, err = w.gatherMoved(sctx, m); err == nil && w.job.Rank == 0 {
				res := result{Size: size, Iterations: iters}
				res.Procs, res.Strategy, res.StrategyAsked, res.Engine, res.EngineCPU = n, all[0].Strategy, strategy, w.engineName, w.engineCPU
				lo, hi, sum := math.Inf(1), 0.0, 0.0
				for r, t := range times {
					if len(t) != 8 {
						cancel()
						return fmt.Errorf("rank %d's time: %d bytes", r, len(t))
					}
					x := math.Float64frombits(binary.BigEndian.Uint64(t))
					lo, hi, sum = min(lo, x), max(hi, x), sum+x
					res.Fallbacks += all[r].Fallbacks
					res.ShmMappedMax = max(res.ShmMappedMax, all[r].Mapped)
					res.ShmRingsMax = max(res.ShmRingsMax, all[r].Rings)
					res.ShmNodeBytes += all[r].Owned
				}
				res.TMinUS, res.TMaxUS, res.LatencyUS = lo, hi, sum/float64(n)
				res.TAvgUS = res.LatencyUS
				if res.LatencyUS > 0 {
					res.MBPerS = float64((n-1)*size) / res.LatencyUS
				}
				rep.row(res)
			}
		}
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}
