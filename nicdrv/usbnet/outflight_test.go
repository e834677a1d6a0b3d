package usbnet_test

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
)

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestOutFlight holds the sending device's bulk OUT pipe (as a device that
// NAKs does) and checks that the driver keeps exactly OutFlight transfers
// in flight, no more, that the frames arrive whole and in order once the
// device takes them, each ECM frame its own transfer, and that closing
// with transfers in flight cancels them.
func TestOutFlight(t *testing.T) {
	for _, m := range []usbnet.Model{usbnet.ECM, usbnet.NCM} {
		t.Run(m.String(), func(t *testing.T) {
			const flight, count = 3, 200
			devs := pair(m)
			o := usbnet.DefaultOptions()
			o.OutFlight = flight
			nics := openPair(t, devs, o)
			a, b := nics[0], nics[1]
			defer b.Close()
			devs[0].HoldOut(true)
			buf := make([]byte, 2048)
			send := func(seq int) {
				size := 60 + seq*37%1400
				tx, err := a.Pool(0).Get()
				if err != nil {
					t.Fatal(err)
				}
				nictest.Frame(tx.SetLen(size), b.MAC(), a.MAC(), uint64(seq), size)
				if k, err := a.TxBatch(0, []*nicdrv.Buffer{tx}); k != 1 || err != nil {
					t.Fatalf("TxBatch frame %d: %d, %v", seq, k, err)
				}
			}
			for seq := range count {
				send(seq)
			}
			waitFor(t, "OutFlight transfers in flight at the device", func() bool {
				now, _ := devs[0].OutPending()
				return now == flight && a.OutInFlight() == flight
			})
			if _, most := devs[0].OutPending(); most != flight {
				t.Fatalf("%d transfers in flight at most, want OutFlight %d", most, flight)
			}
			devs[0].HoldOut(false)
			rx := make([]*nicdrv.Buffer, 16)
			for next := 0; next < count; {
				waitFor(t, "the held frames to arrive", func() bool {
					k, err := b.RxBatch(0, rx)
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range rx[:k] {
						size := 60 + next*37%1400
						if want := nictest.Frame(buf, b.MAC(), a.MAC(), uint64(next), size); string(r.Data) != string(want) {
							t.Fatalf("frame %d: %d bytes, not the %d sent (out of order or torn)", next, len(r.Data), size)
						}
						next++
					}
					b.Pool(0).Free(rx[:k]...)
					return k > 0
				})
			}
			if _, most := devs[0].OutPending(); most > flight {
				t.Fatalf("%d transfers in flight at most, want at most %d", most, flight)
			}
			xfers, frames := devs[0].Transfers()
			if frames != count || (m == usbnet.ECM && xfers != count) || (m == usbnet.NCM && xfers >= count) {
				t.Fatalf("%d transfers of %d frames for %d frames sent: want one transfer per ECM frame, fewer for NCM", xfers, frames, count)
			}
			waitFor(t, "the transfers to settle", func() bool { return a.OutInFlight() == 0 })

			// Closing with transfers in flight cancels them.
			devs[0].HoldOut(true)
			for seq := range flight {
				send(count + seq)
			}
			waitFor(t, "transfers in flight before Close", func() bool {
				now, _ := devs[0].OutPending()
				return now > 0
			})
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if now, _ := devs[0].OutPending(); now != 0 {
				t.Fatalf("%d transfers still in flight after Close", now)
			}
			for _, d := range devs {
				if err := d.Check(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
