package mx_test

import (
	"context"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// Example opens two boards on an in-process wire, connects an endpoint of
// one to an endpoint of the other, and sends a message with a match value
// that the receive selects. Over UDP, AF_XDP, a NIC or shared memory only
// the transport given to NewBoard changes.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	wire := loopback.NewNetwork(loopback.Options{})
	defer wire.Close()
	var boards [2]*mx.Board
	for i := range boards {
		port, err := wire.Attach(transport.NICID(0x1000 + i)) // the board's NIC id
		if err != nil {
			fmt.Println(err)
			return
		}
		b, err := mx.NewBoard(port, mx.DefaultBoardOptions())
		if err != nil {
			fmt.Println(err)
			return
		}
		defer b.Close()
		boards[i] = b
	}
	const key = 0x5ec7e7 // an endpoint accepts connects presenting its key
	sender, err := boards[0].OpenEndpoint(0, key)
	if err != nil {
		fmt.Println(err)
		return
	}
	receiver, err := boards[1].OpenEndpoint(3, key)
	if err != nil {
		fmt.Println(err)
		return
	}

	// The receive may be posted before the message exists: it takes the
	// first message whose match, under the mask, equals 42.
	buf := make([]byte, 64)
	recv, err := receiver.IRecv([][]byte{buf}, 42, ^uint64(0), nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	peer, err := sender.Connect(ctx, boards[1].NICID(), 3, key)
	if err != nil {
		fmt.Println(err)
		return
	}
	send, err := sender.ISend([][]byte{[]byte("hello, "), []byte("gomx")}, peer, 42, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := send.Wait(ctx); err != nil {
		fmt.Println("send:", err)
		return
	}
	st, err := recv.Wait(ctx)
	if err != nil {
		fmt.Println("receive:", err)
		return
	}
	fmt.Printf("%q from endpoint %d, match %d\n", buf[:st.XferLength], st.Source.Endpoint, st.Match)
	// Output:
	// "hello, gomx" from endpoint 0, match 42
}
