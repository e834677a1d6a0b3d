package main

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
)

// Queued boards (--queues) and placement (--bind-app) for pingpong and
// stream: each side's transport is served by an mx.QueuedBoard, a board
// per NIC queue with its own progress thread, and with --bind-app each
// queue's thread is bound to a CPU and each side's goroutine runs on the
// CPU serving its endpoint, as Open-MX's multiqueue design places a
// process on the core of its endpoint's queue (docs/nics.md).

// maxQueues bounds --queues: the 82599 has 64 queue pairs.
const maxQueues = 64

// validateQueues checks --queues and --bind-app against the wire, and
// hands the queue count to the wire that opens the transports.
func (f *benchFlags) validateQueues(cmd string) error {
	switch {
	case f.queues < 0 || f.queues > maxQueues:
		return usagef(cmd, "--queues %d: want 1 to %d queues per board, or 0 for one board on one queue", f.queues, maxQueues)
	case f.bindApp && f.queues == 0:
		return usagef(cmd, "--bind-app places each side's goroutine on the CPU of its endpoint's queue: add --queues N")
	case f.queues == 0:
		return nil
	case f.transport != "nic" && f.transport != "xdp":
		return usagef(cmd, "--queues needs a wire with NIC queues: --transport nic (--nic model-82599 for two emulated 82599s) or --transport xdp")
	case f.transport == "xdp" && f.xdp.iface != "":
		return usagef(cmd, "--queues over xdp runs on the veth pair mxbench makes (it knows the UDP addresses there): drop --iface and --peer-iface")
	case f.faults.any():
		return usagef(cmd, "--loss, --reorder, --dup and --corrupt wrap a board's whole transport, not each of its queues: drop them or --queues")
	}
	f.nic.queues, f.xdp.queues = f.queues, f.queues
	return nil
}

// board is one side's board: a plain board, or a queued board of
// --queues queues. open opens an endpoint on it (on its least loaded
// queue); note says how the queues' threads are placed, for the header.
type board struct {
	open  func(id int, key uint32) (*mx.Endpoint, error)
	close func() error
	note  string
	// boards are its mx boards: the one, or each queue's.
	boards []*mx.Board
}

// openBoard opens side's board (0 or 1) over tr, which it owns from then
// on: closed by the board, or at once when the board cannot open. With
// --bind-app, queue q of side s is bound to the allowed CPU (q+s) mod
// their count, so both sides' busiest queues, queue 0, run apart.
func (f *benchFlags) openBoard(tr transport.Transport, side int) (*board, error) {
	opts := f.boardOptions()
	opts.ProgressThread = side == 0 && f.ownThread
	if f.queues == 0 {
		b, err := mx.NewBoard(tr, opts)
		if err != nil {
			tr.Close()
			return nil, err
		}
		return &board{open: b.OpenEndpoint, close: b.Close, boards: []*mx.Board{b}}, nil
	}
	qo := mx.QueuedOptions{Board: opts, Queues: f.queues}
	note := ", progress threads unbound"
	if f.bindApp {
		cpus, err := allowedCPUs()
		if err != nil {
			tr.Close()
			return nil, err
		}
		for q := range f.queues {
			qo.CPUs = append(qo.CPUs, cpus[(q+side)%len(cpus)])
		}
		note = fmt.Sprintf(", each queue's progress thread and its endpoints' goroutine bound to one CPU (side a's queues on CPUs %v)", qo.CPUs)
	}
	qb, err := mx.NewQueuedBoard(tr, qo)
	if err != nil {
		tr.Close()
		var fix string
		if qt, ok := tr.(transport.Queued); ok && errors.Is(err, mx.ErrBadOptions) && f.queues > qt.Queues() {
			fix = fmt.Sprintf(": the wire has %d queues per board; lower --queues", qt.Queues())
		}
		return nil, fmt.Errorf("--queues %d: %w%s", f.queues, err, fix)
	}
	return &board{open: qb.OpenEndpoint, close: qb.Close, note: note, boards: qb.Boards()}, nil
}

// place puts the calling goroutine where side s's work belongs: with
// --bind-app on the CPU serving its endpoint (locked to its thread and
// bound there), else, when busy-polling, on CPU cpu (pinThread). It does
// not unlock but for the pinned side's passes through the scheduler
// (reschedule): the pinned thread retires with the goroutine.
func (f *benchFlags) place(s *side, cpu int) {
	if f.bindApp {
		if cpus := s.ep.CPUs(); len(cpus) > 0 && mx.BindThread(cpus) == nil {
			return
		}
	}
	if f.spin() {
		s.pinned = pinThread(cpu)
	}
}

// queuedUDP is the UDP address of side's board on a queued run over the
// emulated NICs: queue q's port is the port + q.
func queuedUDP(side int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + side)}), 40100)
}
