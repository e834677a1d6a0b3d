// Package queueset is the set of queue transports that a queued transport
// (transport/nic's board, xdp's transport) has open, which both share:
// which queues are open, how many are open or opening, and the UDP ports
// steered to queues in software (a porttable.Table).
//
// Open is a slot per queue that a queue's receive path loads without a
// lock to find the queue it hands a frame over to; Mu orders the opening
// and closing of queues, which store and clear the slots. NOpen counts
// the queues open or being opened, for the transport's own Send and Recv
// to refuse to run beside them.
package queueset

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/internal/porttable"
)

// Set is the queues of one transport, T its queue transports' type.
type Set[T any] struct {
	// Mu is held while a queue is opened or closed.
	Mu sync.Mutex
	// Open holds the open queue transport of each queue, nil where the
	// queue is closed.
	Open []atomic.Pointer[T]
	// NOpen counts the queues open or being opened.
	NOpen atomic.Int32
	// Soft maps the UDP ports steered in software to their queues.
	Soft porttable.Table
}

// New returns the set of n closed queues.
func New[T any](n int) *Set[T] {
	return &Set[T]{Open: make([]atomic.Pointer[T], n)}
}

// AnyOpen reports whether a queue of s is open or being opened; a nil s
// has none.
func (s *Set[T]) AnyOpen() bool {
	return s != nil && s.NOpen.Load() > 0
}

// CloseAll closes every open queue transport with closeQueue and returns
// their errors joined.
func (s *Set[T]) CloseAll(closeQueue func(*T) error) error {
	var err error
	for q := range s.Open {
		if x := s.Open[q].Load(); x != nil {
			err = errors.Join(err, closeQueue(x))
		}
	}
	return err
}
