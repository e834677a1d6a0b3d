package mx

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gomx-dev/gomx/transport"
)

// QueuedOptions configure NewQueuedBoard.
type QueuedOptions struct {
	// Board configures every queue's board. ProgressThread is forced on;
	// ProgressCPUs is replaced by the queue's entry of CPUs; Hostname is
	// registered for queue 0's board alone.
	Board BoardOptions
	// Queues is how many of the transport's queues to serve, from queue
	// 0 (0: all of them).
	Queues int
	// CPUs, when set, binds queue q's progress thread to CPU
	// CPUs[q%len(CPUs)]; when empty the threads are locked but not bound,
	// and Endpoint.CPUs names the CPU servicing the queue's interrupt
	// where the queue's transport knows it (transport.IRQCPU).
	CPUs []int
}

// QueuedBoard serves a transport of several queues (transport.Queued) the
// way Open-MX's multiqueue design does: each queue is a Board of its own,
// over the queue's transport, with its own progress goroutine locked to an
// OS thread (and bound to a CPU on request), its own lock and its own
// endpoints, so no endpoint's state crosses cores and receive processing
// scales with queues. The transport steers each queue's NIC id (for the
// NIC transport, a UDP port) to its queue, by a NIC rule where it can, so
// an endpoint's frames are received, matched and completed on its queue's
// thread, or, while the application waits for them, on the waiting
// goroutine itself: a queue's RX ring costs no system call to look at
// (transport.Spinner), so a waiter polls its own queue for its poll window
// and handles what it finds under that queue's locks alone, run to
// completion as a DPDK lcore serves its queue, while the queue's thread
// steps aside (BoardOptions.Spin). A send likewise ends with a look at its
// board's queue, which takes the acks of earlier sends on the sending
// goroutine, and the queue's thread stays away from a queue the
// application so serves as it does from one a waiter polled. OpenEndpoint assigns each endpoint the queue with the fewest
// endpoints; the endpoint's Addr carries its queue's NIC id, which is what
// peers connect to, and Endpoint.CPUs reports the CPU serving it.
type QueuedBoard struct {
	tr     transport.Transport
	boards []*Board
	mu     sync.Mutex
	next   int // the queue the next tie goes to
}

// NewQueuedBoard opens a board per queue of tr, which must implement
// transport.Queued, and owns tr from then on: Close closes it. It fails
// when tr has no queues to open (a NIC transport without UDP framing, say:
// use NewBoard then); it then closes what it opened and leaves tr open,
// the caller's again.
func NewQueuedBoard(tr transport.Transport, o QueuedOptions) (*QueuedBoard, error) {
	qt, ok := tr.(transport.Queued)
	if !ok {
		return nil, fmt.Errorf("%w: a %T has no queues: open it with NewBoard", ErrBadOptions, tr)
	}
	n := qt.Queues()
	if o.Queues < 0 || o.Queues > n {
		return nil, fmt.Errorf("%w: %d queues of a transport with %d", ErrBadOptions, o.Queues, n)
	}
	if o.Queues > 0 {
		n = o.Queues
	}
	qb := &QueuedBoard{}
	undo := func(err error) (*QueuedBoard, error) {
		return nil, errors.Join(err, qb.Close())
	}
	for q := range n {
		x, err := qt.OpenQueue(q)
		if err != nil {
			return undo(fmt.Errorf("mx: open queue %d: %w", q, err))
		}
		bo := o.Board
		bo.ProgressThread = true
		bo.ProgressCPUs = nil
		if len(o.CPUs) > 0 {
			bo.ProgressCPUs = []int{o.CPUs[q%len(o.CPUs)]}
		}
		if q > 0 {
			bo.Hostname = ""
		}
		b, err := NewBoard(x, bo)
		if err != nil {
			return undo(errors.Join(fmt.Errorf("mx: board of queue %d: %w", q, err), x.Close()))
		}
		b.serveSends.Store(true) // rxsource.go: a send serves its queue
		qb.boards = append(qb.boards, b)
	}
	qb.tr = tr
	return qb, nil
}

// Boards returns the board of each queue, queue 0 first.
func (qb *QueuedBoard) Boards() []*Board { return slices.Clone(qb.boards) }

// OpenEndpoint opens an endpoint (id 0..255 of its queue's board, or
// AnyEndpoint) on the queue with the fewest open endpoints. Its Addr names
// the queue's NIC id; its frames arrive on that queue.
func (qb *QueuedBoard) OpenEndpoint(id int, key uint32) (*Endpoint, error) {
	qb.mu.Lock()
	defer qb.mu.Unlock()
	if len(qb.boards) == 0 {
		return nil, &OpError{Op: "open endpoint", Err: ErrBoardClosed}
	}
	best, least := -1, MaxEndpoints+1
	for k := range qb.boards {
		q := (qb.next + k) % len(qb.boards)
		if c := qb.boards[q].openEndpoints(); c < least {
			best, least = q, c
		}
	}
	e, err := qb.boards[best].OpenEndpoint(id, key)
	if err != nil {
		return nil, err
	}
	qb.next = best + 1
	return e, nil
}

// Close closes every queue's board (which closes its endpoints and its
// queue, removing the queue's steering) and then the transport.
func (qb *QueuedBoard) Close() error {
	qb.mu.Lock()
	defer qb.mu.Unlock()
	var err error
	for _, b := range qb.boards {
		err = errors.Join(err, b.Close())
	}
	qb.boards = nil
	if qb.tr != nil {
		err = errors.Join(err, qb.tr.Close())
		qb.tr = nil
	}
	return err
}

// openEndpoints counts the board's open endpoints.
func (b *Board) openEndpoints() int {
	b.mu.Lock()
	defer b.unlockKick()
	n := 0
	for _, e := range b.eps {
		if e != nil {
			n++
		}
	}
	return n
}
