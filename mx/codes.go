package mx

import (
	"errors"
	"fmt"
)

// MX's numeric codes, for code ported from C that compares against
// mx_return_t and mx_status_code_t values: [ReturnCodeOf] and
// [StatusCodeOf] map the package's errors to them, one name for one name.

// ReturnCode is an mx_return_t: what an MX call returns.
type ReturnCode int

// MX return codes (myriexpress.h). Codes 16-18 and 24-26 (address lists,
// broadcast, parameter errors) have no counterpart here.
const (
	Success                     ReturnCode = 0  // MX_SUCCESS
	BadBadBad                   ReturnCode = 1  // MX_BAD_BAD_BAD
	Failure                     ReturnCode = 2  // MX_FAILURE
	AlreadyInitialized          ReturnCode = 3  // MX_ALREADY_INITIALIZED
	NotInitialized              ReturnCode = 4  // MX_NOT_INITIALIZED
	NoDev                       ReturnCode = 5  // MX_NO_DEV
	NoDriver                    ReturnCode = 6  // MX_NO_DRIVER
	NoPerm                      ReturnCode = 7  // MX_NO_PERM
	BoardUnknown                ReturnCode = 8  // MX_BOARD_UNKNOWN
	BadEndpoint                 ReturnCode = 9  // MX_BAD_ENDPOINT
	BadSegList                  ReturnCode = 10 // MX_BAD_SEG_LIST
	BadSegMem                   ReturnCode = 11 // MX_BAD_SEG_MEM
	BadSegCnt                   ReturnCode = 12 // MX_BAD_SEG_CNT
	BadRequest                  ReturnCode = 13 // MX_BAD_REQUEST
	BadMatchMask                ReturnCode = 14 // MX_BAD_MATCH_MASK
	NoResources                 ReturnCode = 15 // MX_NO_RESOURCES
	NotCompleted                ReturnCode = 19 // MX_NOT_COMPLETED
	Busy                        ReturnCode = 20 // MX_BUSY
	BadInfoKey                  ReturnCode = 21 // MX_BAD_INFO_KEY
	BadInfoVal                  ReturnCode = 22 // MX_BAD_INFO_VAL
	BadNIC                      ReturnCode = 23 // MX_BAD_NIC
	BadHostnameArgs             ReturnCode = 27 // MX_BAD_HOSTNAME_ARGS
	HostNotFound                ReturnCode = 28 // MX_HOST_NOT_FOUND
	RequestPending              ReturnCode = 29 // MX_REQUEST_PENDING
	Timeout                     ReturnCode = 30 // MX_TIMEOUT
	NoMatch                     ReturnCode = 31 // MX_NO_MATCH
	BadEndpointID               ReturnCode = 32 // MX_BAD_ENDPOINT_ID
	ConnectionFailed            ReturnCode = 33 // MX_CONNECTION_FAILED
	BadConnectionKey            ReturnCode = 34 // MX_BAD_CONNECTION_KEY
	BadInfoLength               ReturnCode = 35 // MX_BAD_INFO_LENGTH
	NICNotFound                 ReturnCode = 36 // MX_NIC_NOT_FOUND
	BadKernelVersion            ReturnCode = 37 // MX_BAD_KERNEL_VERSION
	BadLibVersion               ReturnCode = 38 // MX_BAD_LIB_VERSION
	NICDead                     ReturnCode = 39 // MX_NIC_DEAD
	CancelNotSupported          ReturnCode = 40 // MX_CANCEL_NOT_SUPPORTED
	CloseInHandler              ReturnCode = 41 // MX_CLOSE_IN_HANDLER
	BadMatchingForContextIDMask ReturnCode = 42 // MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK
	NotSupportedWithContextID   ReturnCode = 43 // MX_NOT_SUPPORTED_WITH_CONTEXT_ID
)

var returnNames = map[ReturnCode]string{
	Success: "MX_SUCCESS", BadBadBad: "MX_BAD_BAD_BAD", Failure: "MX_FAILURE",
	AlreadyInitialized: "MX_ALREADY_INITIALIZED", NotInitialized: "MX_NOT_INITIALIZED", NoDev: "MX_NO_DEV",
	NoDriver: "MX_NO_DRIVER", NoPerm: "MX_NO_PERM", BoardUnknown: "MX_BOARD_UNKNOWN",
	BadEndpoint: "MX_BAD_ENDPOINT", BadSegList: "MX_BAD_SEG_LIST", BadSegMem: "MX_BAD_SEG_MEM",
	BadSegCnt: "MX_BAD_SEG_CNT", BadRequest: "MX_BAD_REQUEST", BadMatchMask: "MX_BAD_MATCH_MASK",
	NoResources: "MX_NO_RESOURCES", NotCompleted: "MX_NOT_COMPLETED", Busy: "MX_BUSY",
	BadInfoKey: "MX_BAD_INFO_KEY", BadInfoVal: "MX_BAD_INFO_VAL", BadNIC: "MX_BAD_NIC",
	BadHostnameArgs: "MX_BAD_HOSTNAME_ARGS", HostNotFound: "MX_HOST_NOT_FOUND",
	RequestPending: "MX_REQUEST_PENDING", Timeout: "MX_TIMEOUT", NoMatch: "MX_NO_MATCH",
	BadEndpointID: "MX_BAD_ENDPOINT_ID", ConnectionFailed: "MX_CONNECTION_FAILED",
	BadConnectionKey: "MX_BAD_CONNECTION_KEY", BadInfoLength: "MX_BAD_INFO_LENGTH",
	NICNotFound: "MX_NIC_NOT_FOUND", BadKernelVersion: "MX_BAD_KERNEL_VERSION",
	BadLibVersion: "MX_BAD_LIB_VERSION", NICDead: "MX_NIC_DEAD",
	CancelNotSupported: "MX_CANCEL_NOT_SUPPORTED", CloseInHandler: "MX_CLOSE_IN_HANDLER",
	BadMatchingForContextIDMask: "MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK",
	NotSupportedWithContextID:   "MX_NOT_SUPPORTED_WITH_CONTEXT_ID",
}

// String returns the MX name of the code.
func (c ReturnCode) String() string {
	if s, ok := returnNames[c]; ok {
		return s
	}
	return fmt.Sprintf("mx_return_t(%d)", int(c))
}

// StatusCode is an mx_status_code_t: how a request completed.
type StatusCode int

// MX request status codes (myriexpress.h).
const (
	StatusSuccess             StatusCode = 0  // MX_STATUS_SUCCESS
	StatusPending             StatusCode = 1  // MX_STATUS_PENDING
	StatusBuffered            StatusCode = 2  // MX_STATUS_BUFFERED
	StatusRejected            StatusCode = 3  // MX_STATUS_REJECTED
	StatusTimeout             StatusCode = 4  // MX_STATUS_TIMEOUT
	StatusTruncated           StatusCode = 5  // MX_STATUS_TRUNCATED
	StatusCancelled           StatusCode = 6  // MX_STATUS_CANCELLED
	StatusEndpointUnknown     StatusCode = 7  // MX_STATUS_ENDPOINT_UNKNOWN
	StatusEndpointClosed      StatusCode = 8  // MX_STATUS_ENDPOINT_CLOSED
	StatusEndpointUnreachable StatusCode = 9  // MX_STATUS_ENDPOINT_UNREACHABLE
	StatusBadSession          StatusCode = 10 // MX_STATUS_BAD_SESSION
	StatusBadKey              StatusCode = 11 // MX_STATUS_BAD_KEY
	StatusBadEndpoint         StatusCode = 12 // MX_STATUS_BAD_ENDPOINT
	StatusBadRDMAWin          StatusCode = 13 // MX_STATUS_BAD_RDMAWIN
	StatusAborted             StatusCode = 14 // MX_STATUS_ABORTED
	StatusEventQFull          StatusCode = 15 // MX_STATUS_EVENTQ_FULL
	StatusNoResources         StatusCode = 16 // MX_STATUS_NO_RESOURCES
)

var statusNames = [...]string{
	"MX_STATUS_SUCCESS", "MX_STATUS_PENDING", "MX_STATUS_BUFFERED", "MX_STATUS_REJECTED",
	"MX_STATUS_TIMEOUT", "MX_STATUS_TRUNCATED", "MX_STATUS_CANCELLED", "MX_STATUS_ENDPOINT_UNKNOWN",
	"MX_STATUS_ENDPOINT_CLOSED", "MX_STATUS_ENDPOINT_UNREACHABLE", "MX_STATUS_BAD_SESSION",
	"MX_STATUS_BAD_KEY", "MX_STATUS_BAD_ENDPOINT", "MX_STATUS_BAD_RDMAWIN", "MX_STATUS_ABORTED",
	"MX_STATUS_EVENTQ_FULL", "MX_STATUS_NO_RESOURCES",
}

// String returns the MX name of the status.
func (c StatusCode) String() string {
	if c >= 0 && int(c) < len(statusNames) {
		return statusNames[c]
	}
	return fmt.Sprintf("mx_status_code_t(%d)", int(c))
}

// errCodes maps each sentinel to what an MX call would have returned and
// how an MX request would have completed.
var errCodes = []struct {
	err    error
	ret    ReturnCode
	status StatusCode
}{
	{ErrTruncated, Success, StatusTruncated},
	{ErrCancelled, Success, StatusCancelled},
	{ErrUnreachable, ConnectionFailed, StatusEndpointUnreachable},
	{ErrBadKey, BadConnectionKey, StatusBadKey},
	{ErrBadSession, ConnectionFailed, StatusBadSession},
	{ErrBadEndpoint, BadEndpointID, StatusEndpointUnknown},
	{ErrEndpointClosed, BadEndpoint, StatusEndpointClosed},
	{ErrTimeout, Timeout, StatusTimeout},
	{ErrWokenUp, Timeout, StatusPending},
	{ErrBadMatchMask, BadMatchMask, StatusRejected},
	{ErrBadSegCount, BadSegCnt, StatusRejected},
	{ErrMessageTooLong, BadSegList, StatusRejected},
	{ErrBadRequest, BadRequest, StatusRejected},
	{ErrCancelNotSupported, CancelNotSupported, StatusRejected},
	{ErrBadRDMAWindow, Failure, StatusBadRDMAWin},
	{ErrBusy, Busy, StatusRejected},
	{ErrNoResources, NoResources, StatusNoResources},
	{ErrBoardClosed, NICDead, StatusAborted},
	{ErrBoardUnknown, BoardUnknown, StatusRejected},
	{ErrHostNotFound, HostNotFound, StatusRejected},
	{ErrBadOptions, BadInfoVal, StatusRejected},
	{ErrNotInHandler, CloseInHandler, StatusRejected},
}

// ReturnCodeOf returns the mx_return_t an MX call failing with err would
// have returned: Success for nil (and for request outcomes such as
// ErrTruncated, which MX reports in the status, not the return value),
// Failure for errors MX has no code for.
func ReturnCodeOf(err error) ReturnCode {
	if err == nil {
		return Success
	}
	for _, c := range errCodes {
		if errors.Is(err, c.err) {
			return c.ret
		}
	}
	return Failure
}

// StatusCodeOf returns the mx_status_code_t of a request whose Status.Code
// (or Wait error) is err: StatusSuccess for nil, StatusAborted for errors
// MX has no status for.
func StatusCodeOf(err error) StatusCode {
	if err == nil {
		return StatusSuccess
	}
	for _, c := range errCodes {
		if errors.Is(err, c.err) {
			return c.status
		}
	}
	return StatusAborted
}
