package transport_test

import (
	"fmt"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// Example sends a batch of frames from one transport to another and
// receives them in a batch: what mx does underneath, with any transport.
// The pair here are two ports of an in-process wire; udp.Listen,
// nic.New, shm.Open and xdp.NewTransport give the same interface.
func Example() {
	wire := loopback.NewNetwork(loopback.Options{})
	defer wire.Close()
	a, err := wire.Attach(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := wire.Attach(2)
	if err != nil {
		fmt.Println(err)
		return
	}
	var ta, tb transport.Transport = a, b

	out := []transport.Frame{
		{Peer: tb.Addr(), Data: []byte("first")},
		{Peer: tb.Addr(), Data: []byte("second")},
	}
	if n, err := ta.Send(out); err != nil {
		fmt.Println("sent", n, err)
		return
	}

	in := make([]transport.Frame, 8) // a batch: up to 8 frames per call
	got := 0
	for got < len(out) {
		n, err := tb.Recv(in[got:], -1) // wait for the first, take what is there
		if err != nil {
			fmt.Println(err)
			return
		}
		got += n
	}
	for _, f := range in[:got] {
		// f.Data is valid until b's next Recv (or Hold it, see Transport.Hold).
		fmt.Printf("from %v: %s\n", f.Peer, f.Data)
	}
	// Output:
	// from 00:00:00:00:00:01: first
	// from 00:00:00:00:00:01: second
}
