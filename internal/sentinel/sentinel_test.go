package sentinel_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
	"github.com/gomx-dev/gomx/xdp"
)

// TestOneValuePerMeaning pins that every package's name for one meaning is
// one value: an error made in any layer, wrapped as that layer wraps it,
// matches every other package's name with errors.Is, both ways.
func TestOneValuePerMeaning(t *testing.T) {
	for _, m := range []struct {
		meaning string
		names   map[string]error
	}{
		{"closed", map[string]error{
			"pci.ErrClosed": pci.ErrClosed, "hugepage.ErrClosed": hugepage.ErrClosed,
			"ioat.ErrClosed": ioat.ErrClosed, "nicdrv.ErrClosed": nicdrv.ErrClosed,
			"transport.ErrClosed": transport.ErrClosed, "xdp.ErrClosed": xdp.ErrClosed,
		}},
		{"not supported", map[string]error{
			"pci.ErrNotSupported": pci.ErrNotSupported, "nicdrv.ErrNotSupported": nicdrv.ErrNotSupported,
			"xdp.ErrNotSupported": xdp.ErrNotSupported,
		}},
		{"timed out", map[string]error{"ioat.ErrTimeout": ioat.ErrTimeout, "nicdrv.ErrTimeout": nicdrv.ErrTimeout}},
		{"busy", map[string]error{"pci.ErrBusy": pci.ErrBusy, "xdp.ErrBusy": xdp.ErrBusy}},
		{"pool exhausted", map[string]error{
			"hugepage.ErrExhausted": hugepage.ErrExhausted, "nicdrv.ErrPoolExhausted": nicdrv.ErrPoolExhausted,
		}},
		{"not pooled", map[string]error{
			"hugepage.ErrNotPooled": hugepage.ErrNotPooled, "nicdrv.ErrNotPooled": nicdrv.ErrNotPooled,
			"shm.ErrNotPool": shm.ErrNotPool,
		}},
		{"no such queue", map[string]error{"nicdrv.ErrBadQueue": nicdrv.ErrBadQueue, "xdp.ErrQueue": xdp.ErrQueue}},
		{"too big", map[string]error{"transport.ErrTooBig": transport.ErrTooBig, "xdp.ErrTooBig": xdp.ErrTooBig}},
	} {
		for an, a := range m.names {
			made := []error{
				fmt.Errorf("layer: op: %w", a),
				&pci.OpError{Op: "op", Err: a},
				&nicdrv.Error{Op: "op", Err: a},
				&xdp.OpError{Op: "op", Queue: -1, Err: a},
			}
			for bn, b := range m.names {
				for _, err := range made {
					if !errors.Is(err, b) {
						t.Errorf("%s: %q (made with %s) does not match %s", m.meaning, err, an, bn)
					}
				}
			}
		}
	}
}

// TestRefinedMatchGeneral pins that the USB driver's narrower conditions
// match the general names: a USB interface held by another process is
// pci.ErrBusy and xdp.ErrBusy, a device node we may not open is
// xdp.ErrPermission. The narrower name keeps its own message.
func TestRefinedMatchGeneral(t *testing.T) {
	for _, c := range []struct {
		narrow  error
		general []error
		text    string
	}{
		{usbnet.ErrBusy, []error{pci.ErrBusy, xdp.ErrBusy}, "busy: interface claimed by another process"},
		{usbnet.ErrAccess, []error{xdp.ErrPermission}, "permission denied on the USB device node"},
	} {
		err := fmt.Errorf("open 1-2: %w", c.narrow)
		for _, g := range c.general {
			if !errors.Is(err, g) {
				t.Errorf("%q does not match %q", err, g)
			}
		}
		if c.narrow.Error() != c.text {
			t.Errorf("message %q, want %q", c.narrow, c.text)
		}
	}
}

// TestDistinctMeanings guards against two meanings collapsing into one
// value: each shared sentinel matches no other.
func TestDistinctMeanings(t *testing.T) {
	all := []error{pci.ErrClosed, pci.ErrNotSupported, ioat.ErrTimeout, pci.ErrBusy, xdp.ErrPermission,
		hugepage.ErrExhausted, hugepage.ErrNotPooled, xdp.ErrQueue, transport.ErrTooBig}
	for i, a := range all {
		for j, b := range all {
			if i != j && errors.Is(a, b) {
				t.Errorf("%q matches %q", a, b)
			}
		}
	}
}
