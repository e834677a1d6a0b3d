package nic_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
)

// TestClosedNIC: once the NIC under a transport is closed, the transport's
// Send and Recv fail with an error that is at once transport.ErrClosed (the
// name a transport user tests) and nicdrv.ErrClosed (the name a driver user
// tests), and pci.ErrClosed too: one value for one meaning across layers.
func TestClosedNIC(t *testing.T) {
	p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	n, err := e1000e.Open(p.Functions()[0], e1000e.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := nic.New(n, nic.Options{})
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	defer tr.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	_, sendErr := tr.Send([]transport.Frame{{Peer: tr.Addr(), Data: []byte("after close")}})
	_, recvErr := tr.Recv(make([]transport.Frame, 1), time.Second)
	for _, c := range []struct {
		call string
		err  error
	}{{"Send", sendErr}, {"Recv", recvErr}} {
		for _, want := range []error{transport.ErrClosed, nicdrv.ErrClosed, pci.ErrClosed} {
			if !errors.Is(c.err, want) {
				t.Errorf("%s over a closed NIC: %v, want an error matching %q", c.call, c.err, want)
			}
		}
	}
}
