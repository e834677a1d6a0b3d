package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/udp"
)

// A job: mxbench as one of N processes, started by mpirun, srun, a PMI
// launcher or `--procs N` (procs.go). Every rank opens one udp board per
// strategy it measures (the strategy is a board option), with the host
// path on, so mx itself sends to ranks of the same host through shared
// memory and to the others over UDP. The ranks trade their boards' NIC ids
// through the launcher bootstrap (cmd/internal/launch), connect to each other,
// and from then on speak only mx: barriers, gathers and the measured
// messages all go through the endpoints, on tags of their own.

// Tags of a job's messages. Collectives carry their sequence number and,
// toward rank 0, the sender's rank, so every receive matches exactly one
// message; alltoall's data carries the sender's rank.
const (
	tagColl     uint64 = 0x6d79 << 48
	tagCollBack uint64 = 0x6d7a << 48
	tagA2A      uint64 = 0x6d7b << 48
	maxGather          = 4096
)

// world is this rank's view of a job: one board and endpoint per
// strategy, and every rank's address on each.
type world struct {
	job    launch.Job
	boards []*mx.Board
	eps    []*mx.Endpoint
	// peers[k][r] is rank r's address on board k (zero for this rank),
	// nics[k][r] its NIC id.
	peers [][]mx.Addr
	nics  [][]transport.NICID
	seq   uint64
	gbuf  [][]byte
	// engineName is the boards' copy engine, for the rows (engine.go).
	engineName string
	engineCPU  *int // its threads' CPU (--engine-cpu), for the rows
	// progressCPU is where rank 0's other threads run while overlap
	// computes (--progress-cpu, progress.go); nil: beside it.
	progressCPU *int
	// startup is how long after its process started this rank had its
	// boards open and every peer connected (procstat.go); startupMax,
	// on rank 0, the slowest rank's, for the rows.
	startup    time.Duration
	startupMax time.Duration
	// inProcess is set when ranks 0 and 1 are two boards of this
	// process (overlapLocal) rather than processes of a job; local is
	// then, on rank 0, the pair, whose copies and recovery both ranks'
	// rows report.
	inProcess bool
	local     *pair
	// own are rank 0's boards whose progress threads' CPU clocks overlap
	// reads for own_availability (mx.BoardOptions.ProgressThread): all of
	// side a's boards, with --wait block; nil otherwise.
	own []*mx.Board
	// bound: --procs bound this rank's process to one CPU (bindRanks).
	bound bool
	// pinned is the thread this rank's goroutine busy-polls on, pinned
	// to a CPU (runJobCommand); its pingpong's sides pass through the
	// scheduler on it (pinnedThread.reschedule). nil when the rank does
	// not pin.
	pinned *pinnedThread
}

// jobStrategies returns the large-message strategies a job measures, as mx
// names them: the one --strategy names, every one mx knows for
// --strategy all, or none (mx's own choice, GOMX_SHM_LARGE or auto).
func jobStrategies(name string) ([]string, error) {
	switch name {
	case "":
		return []string{""}, nil
	case "all":
		return mxStrategies(), nil
	}
	var out []string
	for _, n := range strings.Split(name, ",") {
		s, err := mx.ParseLargeStrategy(n)
		if err != nil {
			return nil, fmt.Errorf("--strategy %q: want all, or one or more of %s (comma-separated)", name, strings.Join(mxStrategies(), ", "))
		}
		out = append(out, s.String())
	}
	return out, nil
}

// mxStrategies lists the large-message strategies mx knows, by the names
// mx gives them: every mx.LargeStrategy value whose name parses back to
// it, so a strategy mx adds appears here without a change to mxbench.
func mxStrategies() []string {
	var out []string
	for i := 0; i < 64; i++ {
		s := mx.LargeStrategy(i)
		p, err := mx.ParseLargeStrategy(s.String())
		if err != nil || p != s {
			break
		}
		out = append(out, s.String())
	}
	return out
}

// openWorld opens this rank's boards and endpoints, trades NIC ids through
// the bootstrap at addr (on ln when rank 0 listens already) and connects
// to every other rank.
//
// re, when not nil, is the copy engine every board is given.
func openWorld(ctx context.Context, f *benchFlags, job launch.Job, addr string, ln net.Listener, strategies []string, re *rankEngine, waitsOnly bool) (_ *world, err error) {
	w := &world{job: job}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	listen := f.listen
	if listen == "" {
		// Ranks on other hosts must reach this board: one node's ranks
		// bind 127.0.0.1, a job across nodes the address that routes to
		// another node of the job, or, under a launcher that names none
		// (hydra), the address MPICH itself would take (launch.BindAddr).
		a, err := launch.BindAddr(ctx, job, addr, os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("%w: give --listen IP:0, an address of this node the other nodes reach", err)
		}
		listen = netip.AddrPortFrom(a, 0).String()
	}
	key := uint32(f.key)
	var rec []byte
	for _, name := range strategies {
		tr, err := udp.Listen(listen, udp.Options{})
		if err != nil {
			return nil, fmt.Errorf("--listen %s: %w", listen, err)
		}
		o := f.boardOptions()
		o.Local.Off = false // the host path (shared memory) is the point
		if waitsOnly {
			o.BusyPoll = false
		}
		if re != nil {
			o.Local.Engine = re.eng
		}
		if name != "" {
			if o.Local.Large, err = mx.ParseLargeStrategy(name); err != nil {
				tr.Close()
				return nil, err
			}
		}
		b, err := mx.NewBoard(tr, o)
		if err != nil {
			tr.Close()
			return nil, err
		}
		w.boards = append(w.boards, b)
		ep, err := b.OpenEndpoint(0, key)
		if err != nil {
			return nil, err
		}
		w.eps = append(w.eps, ep)
		rec = binary.BigEndian.AppendUint64(rec, uint64(b.NICID()))
	}
	var table [][]byte
	if ln != nil {
		table, err = launch.Serve(ctx, ln, job.Size, rec)
	} else {
		table, err = launch.Exchange(ctx, job, addr, rec)
	}
	if err != nil {
		return nil, err
	}
	for k := range w.boards {
		nics := make([]transport.NICID, job.Size)
		for r, t := range table {
			if len(t) != len(rec) {
				return nil, fmt.Errorf("rank %d runs another mxbench (a record of %d bytes, want %d): give every rank the same arguments", r, len(t), len(rec))
			}
			nics[r] = transport.NICID(binary.BigEndian.Uint64(t[8*k:]))
		}
		w.nics = append(w.nics, nics)
		peers := make([]mx.Addr, job.Size)
		for r := range job.Size {
			if r == job.Rank {
				continue
			}
			if peers[r], err = w.eps[k].Connect(ctx, nics[r], 0, key); err != nil {
				return nil, fmt.Errorf("connect to rank %d (%v): %w", r, nics[r], err)
			}
		}
		w.peers = append(w.peers, peers)
	}
	w.startup, _ = sinceProcessStart()
	return w, w.barrier(ctx)
}

// gatherStartup collects every rank's start-up time on rank 0 and returns
// the header's note on it: the slowest rank's and the mean.
func (w *world) gatherStartup(ctx context.Context) (string, error) {
	recs, err := w.gather(ctx, binary.BigEndian.AppendUint64(nil, uint64(w.startup)))
	if err != nil || w.job.Rank != 0 {
		return "", err
	}
	var sum time.Duration
	for r, rec := range recs {
		if len(rec) != 8 {
			return "", fmt.Errorf("rank %d's start-up time: %d bytes", r, len(rec))
		}
		d := time.Duration(binary.BigEndian.Uint64(rec))
		w.startupMax = max(w.startupMax, d)
		sum += d
	}
	return fmt.Sprintf("; every rank up and connected within %v of its start (mean %v)",
		w.startupMax.Round(time.Millisecond), (sum / time.Duration(len(recs))).Round(time.Millisecond)), nil
}

func (w *world) close() {
	for _, b := range w.boards {
		b.Close()
	}
}

// printCounters prints, one line per board, the counters of this rank's
// boards and transports that are not zero: what a failed rank says about
// its failure (a peer declared unreachable, a ring found broken or its
// peer gone), for its launcher's or rank 0's report; with --counters, what
// rank 0's boards did over the whole job.
func (w *world) printCounters(out io.Writer) {
	for k, b := range w.boards {
		var parts []string
		add := func(c mx.Counter, v uint64) { parts = append(parts, fmt.Sprintf("%v: %d", c, v)) }
		b.Counters().NonZero(add)
		if k < len(w.eps) && w.eps[k] != nil {
			w.eps[k].Counters().NonZero(add)
		}
		for _, c := range b.TransportCounters() {
			if c.Value != 0 {
				parts = append(parts, fmt.Sprintf("%s: %d", c.Name, c.Value))
			}
		}
		fmt.Fprintf(out, "mxbench: rank %d of %d: board %d counted: %s\n", w.job.Rank, w.job.Size, k, strings.Join(parts, "; "))
	}
}

// hostPath describes how rank 0's first board reaches rank r.
func (w *world) hostPath(r int) string {
	if w.boards[0].HostPath(w.nics[0][r]) {
		return "shared memory"
	}
	return "udp"
}

// paths is a collective: every rank reports which of the others its first
// board reaches through shared memory, and rank 0 returns a phrase saying
// which path each pair of ranks takes (the other ranks return ""). mx
// chooses by itself: shared memory with the ranks whose endpoints it finds
// in this host's endpoint directory, udp with the others.
func (w *world) paths(ctx context.Context) (string, error) {
	n := w.job.Size
	if n > maxGather {
		return "", nil
	}
	row := make([]byte, n)
	for r := range row {
		row[r] = 'u'
		if r == w.job.Rank || w.boards[0].HostPath(w.nics[0][r]) {
			row[r] = 's'
		}
	}
	rows, err := w.gather(ctx, row)
	if err != nil || w.job.Rank != 0 {
		return "", err
	}
	return describePaths(rows), nil
}

// describePaths turns the ranks' rows ('s': shared memory, 'u': udp, by
// peer) into "shared memory among all 4 ranks" or "shared memory within
// ranks [0 1] and [2 3], udp between them", naming any pair whose two
// ends disagree.
func describePaths(rows [][]byte) string {
	n := len(rows)
	shm := func(i, j int) bool { return j < len(rows[i]) && rows[i][j] == 's' }
	group := make([]int, n) // the lowest rank of each rank's host
	for i := range group {
		group[i] = i
		for j := 0; j < i; j++ {
			if shm(i, j) && shm(j, i) {
				group[i] = group[j]
				break
			}
		}
	}
	var hosts [][]int
	index := map[int]int{}
	for i, g := range group {
		k, ok := index[g]
		if !ok {
			k = len(hosts)
			index[g] = k
			hosts = append(hosts, nil)
		}
		hosts[k] = append(hosts[k], i)
	}
	var odd []string
	for i := range n {
		for j := i + 1; j < n; j++ {
			if shm(i, j) != shm(j, i) || (shm(i, j) && group[i] != group[j]) {
				odd = append(odd, fmt.Sprintf("%d-%d", i, j))
			}
		}
	}
	var out string
	switch {
	case len(hosts) == 1:
		out = fmt.Sprintf("paths: shared memory among all %d ranks", n)
	default:
		var hs []string
		for _, h := range hosts {
			hs = append(hs, fmt.Sprint(h))
		}
		out = fmt.Sprintf("paths: shared memory within ranks %s, udp between these %d hosts", strings.Join(hs, " "), len(hosts))
	}
	if len(odd) > 0 {
		out += fmt.Sprintf(" (the two ends disagree on pairs %s)", strings.Join(odd, " "))
	}
	return out
}

// gather sends mine to rank 0, which returns every rank's, by rank; the
// other ranks return nil. Records are at most maxGather bytes.
//
// Collectives send synchronously (ISSend: complete when the receiver has
// the message): an eager send completes before it is acked, and a rank
// that left the last barrier on such a completion could close its board
// while its message to another rank was still unacked, leaving that rank
// waiting for it.
func (w *world) gather(ctx context.Context, mine []byte) ([][]byte, error) {
	if len(mine) > maxGather {
		return nil, fmt.Errorf("gather of %d bytes, at most %d", len(mine), maxGather)
	}
	w.seq++
	tag := tagColl | (w.seq&0xffff_ffff)<<16
	ep := w.eps[0]
	if w.job.Rank != 0 {
		r, err := ep.ISSend([][]byte{mine}, w.peers[0][0], tag|uint64(w.job.Rank), nil)
		if err != nil {
			return nil, err
		}
		if _, err := r.Wait(ctx); err != nil {
			return nil, fmt.Errorf("gather %d to rank 0: %w", w.seq, err)
		}
		return nil, nil
	}
	if len(w.gbuf) < w.job.Size {
		w.gbuf = make([][]byte, w.job.Size)
		for i := range w.gbuf {
			w.gbuf[i] = make([]byte, maxGather)
		}
	}
	reqs := make([]*mx.Request, w.job.Size)
	for r := 1; r < w.job.Size; r++ {
		var err error
		if reqs[r], err = ep.IRecv([][]byte{w.gbuf[r]}, tag|uint64(r), matchAll, nil); err != nil {
			return nil, err
		}
	}
	out := make([][]byte, w.job.Size)
	out[0] = append([]byte(nil), mine...)
	for r := 1; r < w.job.Size; r++ {
		st, err := reqs[r].Wait(ctx)
		if err != nil {
			return nil, fmt.Errorf("gather %d from rank %d: %w", w.seq, r, err)
		}
		out[r] = append([]byte(nil), w.gbuf[r][:st.XferLength]...)
	}
	return out, nil
}

// bcast sends rank 0's msg to every rank and returns it everywhere.
func (w *world) bcast(ctx context.Context, msg []byte) ([]byte, error) {
	w.seq++
	tag := tagCollBack | (w.seq&0xffff_ffff)<<16
	ep := w.eps[0]
	if w.job.Rank != 0 {
		buf := make([]byte, maxGather)
		r, err := ep.IRecv([][]byte{buf}, tag, matchAll, nil)
		if err != nil {
			return nil, err
		}
		st, err := r.Wait(ctx)
		if err != nil {
			return nil, fmt.Errorf("broadcast %d from rank 0: %w", w.seq, err)
		}
		return buf[:st.XferLength], nil
	}
	if len(msg) > maxGather {
		return nil, fmt.Errorf("broadcast of %d bytes, at most %d", len(msg), maxGather)
	}
	var reqs []*mx.Request
	for r := 1; r < w.job.Size; r++ {
		s, err := ep.ISSend([][]byte{msg}, w.peers[0][r], tag, nil)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, s)
	}
	// Every send is waited for, even after one failed: in finish, the
	// first rank may have left (its send fails with ErrUnreachable) while
	// the next has yet to take its message, and a rank 0 that returned
	// then would close its board under that rank. The error returned is
	// the first, unless a later one is not a rank having left.
	var first error
	for i, s := range reqs {
		_, err := s.Wait(ctx)
		if err != nil && (first == nil || errors.Is(first, mx.ErrUnreachable) && !errors.Is(err, mx.ErrUnreachable)) {
			first = fmt.Errorf("broadcast %d to rank %d: %w", w.seq, i+1, err)
		}
	}
	return msg, first
}

// barrier returns when every rank has entered it.
func (w *world) barrier(ctx context.Context) error {
	if _, err := w.gather(ctx, nil); err != nil {
		return err
	}
	_, err := w.bcast(ctx, nil)
	return err
}

// finish is the last barrier before the ranks close their boards. A rank
// closes as soon as it has rank 0's last message, so rank 0's synchronous
// send to it may learn of the match or of the rank's exit first: here an
// unreachable rank is one that left (it had reached the barrier), and a
// rank that crashed instead is reported by its launcher or by --procs.
func (w *world) finish(ctx context.Context) error {
	if _, err := w.gather(ctx, nil); err != nil {
		return err
	}
	_, err := w.bcast(ctx, nil)
	if w.job.Rank == 0 && errors.Is(err, mx.ErrUnreachable) {
		return nil
	}
	return err
}

// errRankFailed is how rank 0 reports a rank that said it failed.
var errRankFailed = errors.New("failed")
