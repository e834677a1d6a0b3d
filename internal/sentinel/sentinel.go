// Package sentinel defines, once, the error values that mean the same thing
// in every layer of gomx: a closed object, a missing feature, a wait that
// timed out, a resource someone else holds, an exhausted or foreign buffer
// pool, a queue that does not exist, a frame larger than the MTU, a missing
// privilege.
//
// The public packages (pci, hugepage, ioat, nicdrv, transport, xdp, and the
// USB driver) re-export these values under their own names, for example
//
//	var ErrClosed = sentinel.ErrClosed // in pci, hugepage, ioat, nicdrv, transport, xdp
//
// so every name of one meaning is the same value. An error therefore
// matches every package's name for its meaning, whichever layer made it:
// the error a transport returns because its NIC was closed satisfies both
// errors.Is(err, transport.ErrClosed) and errors.Is(err, nicdrv.ErrClosed),
// and a caller may test against whichever package it already imports.
//
// The messages are short and generic on purpose: each package wraps the
// sentinel with what failed and where (the device, the operation, the
// queue) and, where one is known, the fix, so the whole message still
// names the problem. This package imports nothing of gomx, so the lowest
// layers (pci, hugepage) can use it without an import running back up.
package sentinel

import "errors"

// The shared sentinels. Their doc comments give the meaning; the packages
// that re-export them say when their calls return them.
var (
	// ErrClosed means the object (a device, a mapping, an interrupt, a
	// region, a pool, a channel, a NIC, a socket, a transport) was closed
	// before or during the call.
	ErrClosed = errors.New("closed")
	// ErrNotSupported means the device, the driver, the kernel or the
	// platform lacks what was asked for.
	ErrNotSupported = errors.New("not supported")
	// ErrTimeout means a register, a link or a device did not reach the
	// expected state within the allowed time.
	ErrTimeout = errors.New("timed out")
	// ErrBusy means someone else holds the resource: another driver,
	// another process, another program or socket on the same slot.
	ErrBusy = errors.New("busy")
	// ErrPermission means the process lacks a privilege or access to a
	// device node.
	ErrPermission = errors.New("permission denied")
	// ErrExhausted means every buffer of a pool is handed out.
	ErrExhausted = errors.New("pool exhausted")
	// ErrNotPooled means a buffer given back to a pool did not come from
	// it, or was given back twice.
	ErrNotPooled = errors.New("not a buffer of this pool")
	// ErrNoQueue means a queue index that the device or interface does not
	// have.
	ErrNoQueue = errors.New("no such queue")
	// ErrTooBig means a frame is larger than the MTU of what was to carry
	// it.
	ErrTooBig = errors.New("frame larger than the MTU")
)
