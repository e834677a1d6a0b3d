package mx

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// The rest of the MX API: per-request timeouts, disconnect, address
// contexts, ibuffered, progression control, and the process-wide view of
// boards (get_info's NIC count and ids, board numbers, ANY_NIC).

// resendLimit is how many resends r gets before its peer is declared
// unreachable: its own timeout, else the endpoint's, else ResendMax.
func (e *Endpoint) resendLimit(r *Request) int {
	switch {
	case r.resendMax > 0:
		return r.resendMax
	case e.resendMax > 0:
		return e.resendMax
	}
	return e.b.opts.ResendMax
}

// SetRequestTimeout sets how long r (a send or connect) may go unacked
// before its peer is declared unreachable (mx_set_request_timeout): d is
// turned into a number of resends, d/ResendDelay, at least one. With r nil
// it sets the endpoint's default for requests posted from then on. As in
// Open-MX, a request that times out resets its peer: every request
// involving it fails with ErrUnreachable.
func (e *Endpoint) SetRequestTimeout(r *Request, d time.Duration) error {
	if d <= 0 {
		return e.opErr("set request timeout", fmt.Errorf("%w: timeout %v must be positive", ErrBadOptions, d))
	}
	b := e.b
	n := max(1, int(d/b.opts.ResendDelay))
	b.mu.Lock()
	defer b.unlockKick()
	if r == nil {
		e.resendMax = n
		return nil
	}
	if r.ep != e || !r.userHeld || (r.kind != kindSend && r.kind != kindConnect) {
		return e.opErr("set request timeout", ErrBadRequest)
	}
	r.resendMax = n
	r.narrow = false // resendMax is reqCold's
	return nil
}

// partnerOf finds the endpoint's record of addr.
func (e *Endpoint) partnerOf(addr Addr) *partner {
	if p := addr.p; p != nil && p.ep == e {
		return p
	}
	return e.partners[partnerKey{addr.NIC, addr.Endpoint}]
}

// Disconnect drops all state about the peer at addr (mx_disconnect): its
// pending sends and receives being pulled from it fail with
// ErrEndpointClosed, its messages waiting in the unexpected queue are
// dropped, and sends to it fail until a new Connect. Unknown addresses are
// an error (ErrBadEndpoint).
func (e *Endpoint) Disconnect(addr Addr) error {
	b := e.b
	b.mu.Lock()
	defer b.unlock()
	p := e.partnerOf(addr)
	if p == nil || !p.rknown {
		return e.opErr("disconnect", fmt.Errorf("%w: %v is not connected", ErrBadEndpoint, addr))
	}
	for u := e.unexp.Front(); u != nil; {
		next := u.q.Next()
		if u.p == p {
			e.dropUnexp(u)
		}
		u = next
	}
	p.reset(ErrEndpointClosed)
	for r := p.connecting.pop(); r != nil; r = p.connecting.pop() {
		e.complete(r, ErrEndpointClosed)
	}
	p.rknown, p.rsession = false, 0
	p.context = nil
	return nil
}

// SetAddrContext attaches v to the peer at addr (mx_set_endpoint_addr_context):
// one value per peer, nil until set, returned by AddrContext for any Addr
// of that peer (statuses' Source included).
func (e *Endpoint) SetAddrContext(addr Addr, v any) error {
	b := e.b
	b.mu.Lock()
	defer b.unlockKick()
	p := e.partnerOf(addr)
	if p == nil {
		return e.opErr("set addr context", fmt.Errorf("%w: no peer %v", ErrBadEndpoint, addr))
	}
	p.context = v
	return nil
}

// AddrContext returns the value SetAddrContext attached to the peer at addr
// (mx_get_endpoint_addr_context), nil if none.
func (e *Endpoint) AddrContext(addr Addr) (any, error) {
	b := e.b
	b.mu.Lock()
	defer b.unlockKick()
	p := e.partnerOf(addr)
	if p == nil {
		return nil, e.opErr("addr context", fmt.Errorf("%w: no peer %v", ErrBadEndpoint, addr))
	}
	return p.context, nil
}

// IBuffered reports whether the send r no longer needs its buffer
// (mx_ibuffered): true for eager sends (tiny, small and medium are copied
// when posted) and for completed sends; false for a large send until it
// completes, since the receiver pulls from its buffer. It fails with
// ErrBadRequest for anything but a send the application still holds.
func (e *Endpoint) IBuffered(r *Request) (bool, error) {
	b := e.b
	b.mu.Lock()
	defer b.unlockKick()
	if r == nil || r.ep != e || !r.userHeld || r.kind != kindSend {
		return false, e.opErr("ibuffered", ErrBadRequest)
	}
	return r.class != classLarge || r.done.Load(), nil
}

// DisableProgression keeps the unexpected handler from running until
// ReenableProgression (mx_disable_progression), so the application can
// change what the handler looks at. Messages that would go to the handler
// meanwhile are not taken: they stay un-acked and their senders resend
// them, to be handled after ReenableProgression. Calls nest.
func (e *Endpoint) DisableProgression() {
	e.b.mu.Lock()
	e.progOff++
	e.b.unlockKick()
}

// ReenableProgression undoes one DisableProgression.
func (e *Endpoint) ReenableProgression() error {
	e.b.mu.Lock()
	defer e.b.unlockKick()
	if e.progOff == 0 {
		return e.opErr("reenable progression", fmt.Errorf("%w: progression is not disabled", ErrBadRequest))
	}
	e.progOff--
	return nil
}

// ---- boards of the process ----

// AnyNIC asks OpenEndpointOn for the first board with a free endpoint.
const AnyNIC = -1

// registry lists the open boards of the process in the order they were
// opened: a board's number is its position (MX board numbers).
var registry struct {
	mu     sync.Mutex
	boards []*Board
}

func register(b *Board) {
	registry.mu.Lock()
	registry.boards = append(registry.boards, b)
	registry.mu.Unlock()
}

func unregister(b *Board) {
	registry.mu.Lock()
	if i := slices.Index(registry.boards, b); i >= 0 {
		registry.boards = slices.Delete(registry.boards, i, i+1)
	}
	registry.mu.Unlock()
}

func openBoards() []*Board {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return slices.Clone(registry.boards)
}

// Info is what mx_get_info reports about the process's boards.
type Info struct {
	NICCount     int               // MX_NIC_COUNT: open boards
	NICIDs       []transport.NICID // MX_NIC_IDS, by board number
	MaxEndpoints int               // MX_MAX_NATIVE_ENDPOINTS per board
}

// GetInfo returns the process's open boards (mx_get_info).
func GetInfo() Info {
	bs := openBoards()
	in := Info{NICCount: len(bs), MaxEndpoints: MaxEndpoints}
	for _, b := range bs {
		in.NICIDs = append(in.NICIDs, b.nic)
	}
	return in
}

// BoardNumberToNICID returns the NIC id of board number n
// (mx_board_number_to_nic_id); ErrBoardUnknown if there is none.
func BoardNumberToNICID(n int) (transport.NICID, error) {
	bs := openBoards()
	if n < 0 || n >= len(bs) {
		return 0, fmt.Errorf("%w: board %d of %d", ErrBoardUnknown, n, len(bs))
	}
	return bs[n].nic, nil
}

// NICIDToBoardNumber returns the board number of the open board with NIC
// id nic (mx_nic_id_to_board_number); ErrBoardUnknown if there is none.
func NICIDToBoardNumber(nic transport.NICID) (int, error) {
	for i, b := range openBoards() {
		if b.nic == nic {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: no open board has NIC id %v", ErrBoardUnknown, nic)
}

// OpenEndpointOn opens endpoint id (or AnyEndpoint) on board number board,
// or on the first board with that endpoint free when board is AnyNIC
// (mx_open_endpoint with MX_ANY_NIC).
func OpenEndpointOn(board, id int, key uint32) (*Endpoint, error) {
	bs := openBoards()
	if board != AnyNIC {
		if board < 0 || board >= len(bs) {
			return nil, &OpError{Op: "open endpoint", Err: fmt.Errorf("%w: board %d of %d", ErrBoardUnknown, board, len(bs))}
		}
		return bs[board].OpenEndpoint(id, key)
	}
	var err error = &OpError{Op: "open endpoint", Err: fmt.Errorf("%w: no board is open", ErrBoardUnknown)}
	for _, b := range bs {
		var e *Endpoint
		if e, err = b.OpenEndpoint(id, key); err == nil {
			return e, nil
		}
	}
	return nil, err
}
