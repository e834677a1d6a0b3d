package nic_test

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
)

// fuzzRig is a raw driver on one model NIC, cabled to a transport on the
// other, built once per fuzzing process.
var fuzzRig struct {
	once sync.Once
	raw  *e1000e.NIC
	tr   *nic.Transport
	err  error
}

// FuzzReceive puts arbitrary bytes on the wire at a transport. The oracle
// is Open-MX framing, restated: a frame arrives iff it is addressed to the
// board (its MAC or broadcast) and carries EtherType 0x86DF; it then
// arrives with the sender's MAC as Peer and everything after the Ethernet
// header as Data, padded with zeros to the 60-byte Ethernet minimum. A
// marker frame sent after each input tells "not delivered" from "late".
func FuzzReceive(f *testing.F) {
	f.Add(byte(0), []byte("\x02\x00\x00\x00\x00\x09\x86\xdf\x00\x01hello"))
	f.Add(byte(1), []byte("\x02\x00\x00\x00\x00\x09\x86\xdf"))
	f.Add(byte(0), []byte("\x02\x00\x00\x00\x00\x09\x08\x00\x45\x00"))
	f.Add(byte(2), bytes.Repeat([]byte{0x86, 0xdf}, 700))
	f.Fuzz(func(t *testing.T, dstSel byte, rest []byte) {
		fuzzRig.once.Do(func() {
			p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
			if err != nil {
				fuzzRig.err = err
				return
			}
			if fuzzRig.raw, err = e1000e.Open(p.Functions()[0], e1000e.DefaultOptions()); err != nil {
				fuzzRig.err = err
				return
			}
			n, err := e1000e.Open(p.Functions()[1], e1000e.DefaultOptions())
			if err == nil {
				fuzzRig.tr, err = nic.New(n, nic.Options{})
			}
			fuzzRig.err = err
		})
		if fuzzRig.err != nil {
			t.Fatal(fuzzRig.err)
		}
		raw, tr := fuzzRig.raw, fuzzRig.tr
		if len(rest) < 8 || len(rest) > 1514-6 {
			return
		}
		trMAC := tr.Addr().MAC()
		var dst [6]byte
		switch dstSel % 4 {
		case 0:
			dst = trMAC
		case 1:
			dst = [6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
		case 2:
			copy(dst[:], rest[:6]) // whatever the input says
		case 3:
			dst = trMAC
			dst[5]++ // another board's address
		}
		frame := append(dst[:], rest...)
		send := func(fr []byte) {
			b, err := raw.Pool(0).Get()
			if err != nil {
				t.Fatal(err)
			}
			copy(b.SetLen(len(fr)), fr)
			if n, err := raw.TxBatch(0, []*nicdrv.Buffer{b}); n != 1 || err != nil {
				t.Fatalf("send: %d, %v", n, err)
			}
		}
		send(frame)
		src := raw.MAC()
		marker := append(append(append(trMAC[:0:0], trMAC[:]...), src[:]...), 0x86, 0xDF, 'm', 'a', 'r', 'k')
		send(marker)

		bcast := dst == [6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}
		// Open-MX's EtherType, or one of the receive lanes' (0x86E0 to
		// 0x86E7: a peer's frames sent to a lane arrive on any queue).
		et := binary.BigEndian.Uint16(frame[12:])
		want := (dst == trMAC || bcast) && (et == 0x86DF || et >= 0x86E0 && et <= 0x86E7)
		padded := append([]byte(nil), frame...)
		for len(padded) < 60 {
			padded = append(padded, 0)
		}
		var sawFrame bool
		frames := make([]transport.Frame, 4)
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := tr.Recv(frames, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, fr := range frames[:n] {
				if bytes.HasPrefix(fr.Data, []byte("mark")) && len(fr.Data) == 46 && !(want && !sawFrame) {
					if fr.Peer != transport.MACNICID(src) {
						t.Fatalf("marker from %v, want the sender %v", fr.Peer, transport.MACNICID(src))
					}
					if want != sawFrame {
						t.Fatalf("frame % x: delivered %v, want %v", frame[:14], sawFrame, want)
					}
					return
				}
				if !want || sawFrame {
					t.Fatalf("unexpected frame delivered: % x (input % x)", fr.Data, frame)
				}
				var from [6]byte
				copy(from[:], frame[6:12])
				if fr.Peer != transport.MACNICID(from) {
					t.Fatalf("Peer %v, want the frame's source %v", fr.Peer, transport.MACNICID(from))
				}
				if !bytes.Equal(fr.Data, padded[14:]) {
					t.Fatalf("Data % x, want % x", fr.Data, padded[14:])
				}
				sawFrame = true
			}
			if time.Now().After(deadline) {
				t.Fatal("the marker frame never arrived")
			}
		}
	})
}
