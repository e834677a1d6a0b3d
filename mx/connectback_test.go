package mx

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestConnectBackAfterTraffic is the omx_perf pattern: a client connects
// and sends its parameters; only then does the server connect back to the
// message's source, and the two exchange messages of every size class.
func TestConnectBackAfterTraffic(t *testing.T) {
	for _, tf := range transportFactories {
		t.Run(tf.name, func(t *testing.T) {
			checkLeaks(t)
			w := tf.new(t, loopback.Faults{})
			server, err := NewBoard(w.a, fastOptions())
			if err != nil {
				t.Fatal(err)
			}
			client, err := NewBoard(w.b, fastOptions())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { server.Close(); client.Close(); w.close() })
			sep, err := server.OpenEndpoint(0, testKey)
			if err != nil {
				t.Fatal(err)
			}
			cep, err := client.OpenEndpoint(AnyEndpoint, testKey)
			if err != nil {
				t.Fatal(err)
			}
			ctx := testCtx(t, 30*time.Second)
			toServer, err := cep.Connect(ctx, server.NICID(), 0, testKey)
			if err != nil {
				t.Fatal(err)
			}
			params := []byte("parameters")
			pbuf := make([]byte, 64)
			pr, _ := sep.IRecv([][]byte{pbuf}, 1, ^uint64(0), nil)
			sr, _ := cep.ISend([][]byte{params}, toServer, 1, nil)
			if _, err := sr.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := pr.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			back, err := sep.Connect(ctx, st.Source.NIC, st.Source.Endpoint, testKey)
			if err != nil {
				t.Fatal(err)
			}
			for _, size := range []int{0, 8, 4096, 100000, 1 << 20} {
				for dir, ends := range [][2]*Endpoint{{cep, sep}, {sep, cep}} {
					from, to := ends[0], ends[1]
					dest := toServer
					if dir == 1 {
						dest = back
					}
					msg := pattern(size, uint64(size+dir))
					got := make([]byte, size)
					rr, err := to.IRecv([][]byte{got}, 2, ^uint64(0), nil)
					if err != nil {
						t.Fatal(err)
					}
					sr, err := from.ISend([][]byte{msg}, dest, 2, nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := sr.Wait(ctx); err != nil {
						t.Fatalf("%d bytes, direction %d: send: %v", size, dir, err)
					}
					if _, err := rr.Wait(ctx); err != nil {
						t.Fatalf("%d bytes, direction %d: receive: %v", size, dir, err)
					}
					if !bytes.Equal(got, msg) {
						t.Fatalf("%d bytes, direction %d: data differ", size, dir)
					}
				}
			}
		})
	}
}
