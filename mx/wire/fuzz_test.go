package wire

import (
	"bytes"
	"testing"
)

// Each fuzz target feeds arbitrary bytes to one decoder; a decoder must never
// panic, and what it accepts must re-encode to the same bytes it decoded.

func seeds(f *testing.F, typ Type) {
	f.Add([]byte{})
	f.Add([]byte{byte(typ)})
	b := make([]byte, 64)
	b[0] = byte(typ)
	f.Add(b)
}

func FuzzFrame(f *testing.F) {
	m := Msg{Type: TypeTiny, Length: 3, Seq: 1}
	f.Add(frame(func(p []byte) int { m.Put(p); return MsgLen + 3 }))
	f.Add([]byte{0, 0, byte(TypePullReply), 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Verify(data, true)
		if err == nil && len(g) > len(data) {
			t.Fatal("frame longer than data")
		}
		_, _ = Verify(data, false)
	})
}

func FuzzMsg(f *testing.F) {
	seeds(f, TypeTiny)
	seeds(f, TypeSmall)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, pl, err := DecodeMsg(p)
		if err != nil {
			return
		}
		b := make([]byte, MsgLen+len(pl))
		h.Put(b)
		copy(b[MsgLen:], pl)
		h2, pl2, err := DecodeMsg(b)
		if err != nil || h2 != h || !bytes.Equal(pl, pl2) {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzMedium(f *testing.F) {
	seeds(f, TypeMedium)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, pl, err := DecodeMedium(p)
		if err != nil {
			return
		}
		if h.Offset()+len(pl) > int(h.MsgLength) {
			t.Fatalf("fragment outside message: %+v", h)
		}
		b := make([]byte, MediumLen+len(pl))
		h.Put(b)
		if h2, _, err := DecodeMedium(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzRndv(f *testing.F) {
	seeds(f, TypeRndv)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeRndv(p)
		if err != nil {
			return
		}
		b := make([]byte, RndvLen)
		h.Put(b)
		if h2, err := DecodeRndv(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzPull(f *testing.F) {
	seeds(f, TypePull)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodePull(p)
		if err != nil {
			return
		}
		if uint64(h.FirstFrame)*uint64(h.FrameLength)+uint64(h.FirstFrameOffset)+uint64(h.BlockLength) > uint64(h.TotalLength) {
			t.Fatalf("block outside pull: %+v", h)
		}
		b := make([]byte, PullLen)
		h.Put(b)
		if h2, err := DecodePull(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzPullReply(f *testing.F) {
	seeds(f, TypePullReply)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, pl, err := DecodePullReply(p)
		if err != nil {
			return
		}
		if len(pl) != int(h.FrameLength) {
			t.Fatal("payload length")
		}
		b := make([]byte, PullReplyLen+len(pl))
		h.Put(b)
		if h2, _, err := DecodePullReply(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzNotify(f *testing.F) {
	seeds(f, TypeNotify)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeNotify(p)
		if err != nil {
			return
		}
		b := make([]byte, NotifyLen)
		h.Put(b)
		if h2, err := DecodeNotify(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzConnect(f *testing.F) {
	seeds(f, TypeConnect)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeConnect(p)
		if err != nil {
			return
		}
		b := make([]byte, ConnectLen)
		h.Put(b)
		if h2, err := DecodeConnect(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzTruc(f *testing.F) {
	seeds(f, TypeTruc)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeTruc(p)
		if err != nil {
			return
		}
		b := make([]byte, TrucLen)
		h.Put(b)
		if h2, err := DecodeTruc(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzNackLib(f *testing.F) {
	seeds(f, TypeNackLib)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeNackLib(p)
		if err != nil {
			return
		}
		b := make([]byte, NackLibLen)
		h.Put(b)
		if h2, err := DecodeNackLib(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}

func FuzzNackMCP(f *testing.F) {
	seeds(f, TypeNackMCP)
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeNackMCP(p)
		if err != nil {
			return
		}
		b := make([]byte, NackMCPLen)
		h.Put(b)
		if h2, err := DecodeNackMCP(b); err != nil || h2 != h {
			t.Fatalf("re-decode: %+v %v", h2, err)
		}
	})
}
