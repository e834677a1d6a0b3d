package mx

import (
	"errors"
	"fmt"
)

// Errors and request status codes. They are sentinels: test them with
// errors.Is. Calls wrap them with detail; a request's [Status].Code is one of
// them (or nil for success).
var (
	// ErrTruncated: the receive buffer was shorter than the message; the
	// status reports both lengths.
	ErrTruncated = errors.New("mx: message truncated")
	// ErrCancelled: the request was cancelled with Cancel.
	ErrCancelled = errors.New("mx: request cancelled")
	// ErrUnreachable: the peer did not answer within the resend limit.
	ErrUnreachable = errors.New("mx: remote endpoint unreachable")
	// ErrBadKey: the peer endpoint refused the connect key.
	ErrBadKey = errors.New("mx: bad connection key")
	// ErrBadSession: the peer endpoint was closed and reopened since the
	// connect (its session changed); connect again.
	ErrBadSession = errors.New("mx: bad session")
	// ErrBadEndpoint: no such endpoint on the peer board, or an invalid
	// endpoint id.
	ErrBadEndpoint = errors.New("mx: bad endpoint")
	// ErrEndpointClosed: the local or remote endpoint is closed.
	ErrEndpointClosed = errors.New("mx: endpoint closed")
	// ErrTimeout: a wait or connect ended (context done) before completion.
	ErrTimeout = errors.New("mx: timeout")
	// ErrWokenUp: a wait was interrupted by Endpoint.Wakeup.
	ErrWokenUp = errors.New("mx: woken up")
	// ErrBadMatchMask: the receive's match info has bits outside its mask.
	ErrBadMatchMask = errors.New("mx: match info has bits outside the mask")
	// ErrBadSegCount: more than MaxSegments segments.
	ErrBadSegCount = errors.New("mx: too many segments")
	// ErrMessageTooLong: a message longer than 4 GiB-1.
	ErrMessageTooLong = errors.New("mx: message longer than 4 GiB-1")
	// ErrBadRequest: a nil, foreign or already completed request.
	ErrBadRequest = errors.New("mx: bad request")
	// ErrCancelNotSupported: only posted receives and connects can be cancelled.
	ErrCancelNotSupported = errors.New("mx: cancel not supported for this request")
	// ErrPullFailed: a large send's receiver gave up pulling it (its pull
	// timed out, or this board refused it); the message was not delivered.
	ErrPullFailed = errors.New("mx: the receiver's pull of the message failed")
	// ErrBadRDMAWindow: the peer refused a pull (region gone or out of range).
	ErrBadRDMAWindow = errors.New("mx: bad remote RDMA window")
	// ErrBusy: the requested endpoint id is already open.
	ErrBusy = errors.New("mx: endpoint busy")
	// ErrNoResources: no free endpoint id, region or handle, or no file
	// descriptor for a connection over shared memory (Connect).
	ErrNoResources = errors.New("mx: no resources")
	// ErrBoardClosed: the board is closed.
	ErrBoardClosed = errors.New("mx: board closed")
	// ErrHostNotFound: a name lookup found nothing.
	ErrHostNotFound = errors.New("mx: host not found")
	// ErrBadOptions: invalid options.
	ErrBadOptions = errors.New("mx: bad options")
	// ErrBoardUnknown: no open board has that number or NIC id.
	ErrBoardUnknown = errors.New("mx: board unknown")
	// ErrNotInHandler: the call is not allowed from an unexpected handler.
	ErrNotInHandler = errors.New("mx: not supported inside the unexpected handler")
)

// OpError records a failed call, the endpoint it was made on, and the cause.
type OpError struct {
	Op       string // "connect", "isend", "open endpoint", ...
	Endpoint uint8
	Err      error
}

// Error formats the operation, endpoint and cause.
func (e *OpError) Error() string {
	return fmt.Sprintf("mx: %s (endpoint %d): %v", e.Op, e.Endpoint, e.Err)
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }
