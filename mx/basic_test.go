package mx

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

func TestSizeClasses(t *testing.T) {
	for _, tf := range transportFactories {
		t.Run(tf.name, func(t *testing.T) {
			pr := newPair(t, tf, fastOptions(), loopback.Faults{})
			th := pr.ba.RendezvousThreshold()
			sizes := []int{0, 1, 8, 31, 32, 33, 127, 128, 129, 1000, 8192, th - 1, th, th + 1, 100000, 1 << 20, 4<<20 + 1}
			for _, sync := range []bool{false, true} {
				for i, n := range sizes {
					name := fmt.Sprintf("%d", n)
					if sync {
						name += "/issend"
					}
					t.Run(name, func(t *testing.T) {
						msg := pattern(n, uint64(i))
						got := make([]byte, n+7)
						rr, err := pr.b.IRecv([][]byte{got}, uint64(i), ^uint64(0), "ctx")
						if err != nil {
							t.Fatal(err)
						}
						send := pr.a.ISend
						if sync {
							send = pr.a.ISSend
						}
						sr, err := send([][]byte{msg}, pr.atob, uint64(i), nil)
						if err != nil {
							t.Fatal(err)
						}
						st := mustWait(t, rr, 30*time.Second)
						if st.MsgLength != uint32(n) || st.XferLength != uint32(n) || st.Match != uint64(i) || st.Context != "ctx" {
							t.Fatalf("recv status %+v", st)
						}
						if st.Source.NIC != pr.ba.NICID() || st.Source.Endpoint != 1 {
							t.Fatalf("source %v", st.Source)
						}
						if !bytes.Equal(got[:n], msg) {
							t.Fatalf("payload differs")
						}
						sst := mustWait(t, sr, 30*time.Second)
						if sst.XferLength != uint32(n) {
							t.Fatalf("send status %+v", sst)
						}
					})
				}
			}
		})
	}
}
