package launch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// flex128 integers as OpenPMIx's psquash/flex128 writes them
// (flex_pack_integer: seven bits a byte, least significant first, the
// continuation bit 0x80, a ninth byte of eight bits; signed values folded
// by FLEX128_PACK_CONVERT_SIGNED).
func TestPMIxFlex(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		want []byte
	}{
		{0, []byte{0x00}},
		{1, []byte{0x01}},
		{127, []byte{0x7f}},
		{128, []byte{0x80, 0x01}},
		{300, []byte{0xac, 0x02}},
		{math.MaxUint32 - 1, []byte{0xfe, 0xff, 0xff, 0xff, 0x0f}}, // PMIX_RANK_WILDCARD
		{1<<56 - 1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{1 << 56, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
		{math.MaxUint64, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
	} {
		if got := appendFlex(nil, c.v); !bytes.Equal(got, c.want) {
			t.Errorf("appendFlex(%d) = % x, want % x", c.v, got, c.want)
		}
		v, n, err := decodeFlex(c.want)
		if err != nil || v != c.v || n != len(c.want) {
			t.Errorf("decodeFlex(% x) = %d, %d, %v; want %d, %d", c.want, v, n, err, c.v, len(c.want))
		}
		if _, _, err := decodeFlex(c.want[:len(c.want)-1]); !errors.Is(err, errPMIxShort) {
			t.Errorf("decodeFlex(% x), cut: %v, want errPMIxShort", c.want[:len(c.want)-1], err)
		}
	}
	// Signed: 0, 1, -1, -2 fold to 0, 2, 1, 3; a count of one is 0x02.
	for n, want := range map[int64]uint64{0: 0, 1: 2, -1: 1, -2: 3, math.MinInt32: math.MaxUint32} {
		if got := zigzag(n); got != want {
			t.Errorf("zigzag(%d) = %d, want %d", n, got, want)
		}
		u := pmixUnpacker{appendFlex(nil, want)}
		if got, err := u.signed(64); err != nil || got != n {
			t.Errorf("signed(% x) = %d, %v; want %d", appendFlex(nil, want), got, err, n)
		}
	}
	// An integer too wide for its type is refused, as OpenPMIx's decoder
	// refuses one longer than the type.
	u := pmixUnpacker{appendFlex(nil, 1<<32)}
	if _, err := u.flex(32); err == nil {
		t.Error("flex(32) took 2^32")
	}
}

// The commands' bytes, field by field as OpenPMIx's client packs them
// (PMIX_BFROPS_PACK: a count, then the values; see pmixwire.go).
func TestPMIxMessages(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want []byte
	}{
		{"commit", commitMsg("k", []byte{0xaa, 0xbb}), cat(
			// _commitfn: PMIX_COMMAND, then a PMIX_SCOPE and a PMIX_BUFFER.
			[]byte{0x02, 2},            // 1 command: PMIX_COMMIT_CMD
			[]byte{0x02, 3},            // 1 scope: PMIX_GLOBAL
			[]byte{0x02, 1, 8},         // 1 buffer: NON_DESC, 8 bytes
			[]byte{0x02},               // 1 kval
			[]byte{0x04, 'k', 0},       // key: 2 bytes with the NUL
			[]byte{27},                 // PMIX_BYTE_OBJECT
			[]byte{0x02, 0xaa, 0xbb})}, // size 2, the bytes
		{"fence", fenceMsg("ns"), cat(
			// pack_fence: cmd, nprocs (PMIX_SIZE), procs (PMIX_PROC),
			// ninfo (PMIX_SIZE), info (PMIX_INFO).
			[]byte{0x02, 3},                                // PMIX_FENCENB_CMD
			[]byte{0x02, 1},                                // 1 proc
			[]byte{0x02, 0x06, 'n', 's', 0},                // nspace "ns"
			[]byte{0xfe, 0xff, 0xff, 0xff, 0x0f},           // PMIX_RANK_WILDCARD
			[]byte{0x02, 1},                                // 1 info
			[]byte{0x02, 0x1a}, []byte("pmix.collect\x00"), // key, 13 bytes
			[]byte{0x00},   // no directives
			[]byte{1, 1})}, // PMIX_BOOL true
		{"get", getMsg("ns", 3, "k"), cat(
			// _pack_get: cmd, nspace, rank, ninfo, key.
			[]byte{0x02, 4},
			[]byte{0x02, 0x06, 'n', 's', 0},
			[]byte{0x02, 3},
			[]byte{0x02, 0},
			[]byte{0x02, 0x04, 'k', 0})},
		{"finalize", finalizeMsg(), []byte{0x02, 5}},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s:\n got % x\nwant % x", c.name, c.got, c.want)
		}
	}
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// The handshake of pmix_ptl_base_construct_message for a simple client,
// as pmix_ptl_base_connection_handler reads it.
func TestPMIxHandshake(t *testing.T) {
	got := pmixHandshake("77", 5, 1000, 1001)
	body := cat(
		[]byte("native\x00"),
		[]byte{0, 0, 0, 8}, // credential length, network order
		binary.NativeEndian.AppendUint32(nil, 1000), binary.NativeEndian.AppendUint32(nil, 1001),
		[]byte{0},           // PMIX_SIMPLE_CLIENT
		[]byte("77\x00"),    // nspace
		[]byte{0, 0, 0, 5},  // rank, network order
		[]byte("4.2.2\x00"), // version
		[]byte("v41\x00"),   // bfrops
		[]byte{1},           // PMIX_BFROP_BUFFER_NON_DESC
		[]byte("hash\x00"))  // gds
	hdr := cat([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		binary.NativeEndian.AppendUint32(nil, uint32(len(body))), []byte{0, 0, 0, 0})
	if want := cat(hdr, body); !bytes.Equal(got, want) {
		t.Errorf("handshake:\n got % x\nwant % x", got, want)
	}
}

// pmixServerAddr takes the URIs OpenPMIx servers publish.
func TestPMIxServerAddr(t *testing.T) {
	for uri, want := range map[string]string{
		"1987182592.0;tcp4://127.0.0.1:48255": "127.0.0.1:48255",
		"prterun-h-1@0.0;tcp6://[::1]:4000":   "[::1]:4000",
		"x.0;usock:/tmp/s":                    "",
		"tcp4://127.0.0.1:1":                  "",
		"x.0;tcp4://127.0.0.1":                "",
	} {
		got, err := pmixServerAddr(uri)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("pmixServerAddr(%q) = %q, %v; want %q", uri, got, err, want)
		}
	}
}

// oracleAnswer builds the server's answer to a get as
// pmix_server_get.c:_satisfy_request and get_cbfunc pack it, with Go's
// own varints (identical to flex128 below 2^56) instead of this
// package's encoder.
func oracleAnswer(status int32, procs []oracleProc) []byte {
	str := func(b []byte, s string) []byte {
		return append(binary.AppendVarint(b, int64(len(s)+1)), append([]byte(s), 0)...)
	}
	b := binary.AppendVarint(nil, 1)
	b = binary.AppendVarint(b, int64(status))
	for _, p := range procs {
		in := binary.AppendVarint(nil, 1)
		in = str(in, p.nspace)
		in = binary.AppendUvarint(in, uint64(p.rank))
		for _, kv := range p.kvals {
			in = binary.AppendVarint(in, 1)
			in = str(in, kv.key)
			in = binary.AppendUvarint(in, uint64(kv.typ))
			in = append(in, kv.raw...)
		}
		b = binary.AppendVarint(b, 1)
		b = binary.AppendUvarint(b, uint64(len(in)))
		b = append(b, in...)
	}
	return b
}

type oracleProc struct {
	nspace string
	rank   uint32
	kvals  []oracleKval
}

type oracleKval struct {
	key string
	typ uint16
	raw []byte // the datum as packed
}

func boRaw(v []byte) []byte { return append(binary.AppendUvarint(nil, uint64(len(v))), v...) }

// pmixRecord finds the record among the values a server sends, of other
// types too, and says what is wrong with an answer that lacks it.
func TestPMIxRecord(t *testing.T) {
	ans := oracleAnswer(0, []oracleProc{{"ns", 2, []oracleKval{
		{"pmix.hname", pmixString, append(binary.AppendVarint(nil, 3), 'h', 'x', 0)},
		{"x.size", pmixSize, binary.AppendUvarint(nil, 1<<40)},
		{"x.int", pmixInt, binary.AppendVarint(nil, -5)},
		{"x.flag", pmixBool, []byte{1}},
		{"other", pmixByteObject, boRaw([]byte("no"))},
		{pmixRecordKey, pmixByteObject, boRaw([]byte("yes"))},
	}}})
	if rec, err := pmixRecord(ans, 2, pmixRecordKey); err != nil || string(rec) != "yes" {
		t.Errorf("pmixRecord = %q, %v; want yes", rec, err)
	}
	if _, err := pmixRecord(ans, 3, pmixRecordKey); err == nil || !strings.Contains(err.Error(), "no gomx.record of rank 3") {
		t.Errorf("another rank's answer: %v", err)
	}
	var pe *pmixError
	if _, err := pmixRecord(oracleAnswer(-46, nil), 2, pmixRecordKey); !errors.As(err, &pe) || !strings.Contains(err.Error(), "PMIX_ERR_NOT_FOUND") {
		t.Errorf("status -46: %v", err)
	}
	odd := oracleAnswer(0, []oracleProc{{"ns", 2, []oracleKval{{"x.f", 17, make([]byte, 8)}}}}) // PMIX_DOUBLE
	if _, err := pmixRecord(odd, 2, pmixRecordKey); err == nil || !strings.Contains(err.Error(), "data type 17") {
		t.Errorf("a value this client cannot skip: %v", err)
	}
	for n := range len(ans) {
		if _, err := pmixRecord(ans[:n], 2, pmixRecordKey); err == nil {
			t.Fatalf("an answer cut at %d of %d bytes was taken", n, len(ans))
		}
	}
}

// FuzzPMIxDecode: decodeFlex agrees with an independent reading of the
// same bytes (Go's uvarint for up to eight bytes, big-number arithmetic
// for the ninth), and pmixRecord finds a record in any answer the oracle
// builds, and never panics on the fuzzer's own bytes.
func FuzzPMIxDecode(f *testing.F) {
	f.Add([]byte{0x80, 0x01}, uint32(0), "k", []byte("rec"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint32(7), pmixRecordKey, []byte{})
	f.Add(oracleAnswer(0, []oracleProc{{"ns", 1, []oracleKval{{"k", pmixByteObject, boRaw([]byte("x"))}}}}), uint32(1), "k", []byte("x"))
	f.Fuzz(func(t *testing.T, raw []byte, rank uint32, key string, rec []byte) {
		v, n, err := decodeFlex(raw)
		switch {
		case err != nil:
			if len(raw) >= 9 {
				t.Fatalf("decodeFlex(% x): %v", raw, err)
			}
			for _, b := range raw {
				if b&0x80 == 0 {
					t.Fatalf("decodeFlex(% x): %v with a last byte present", raw, err)
				}
			}
		case n <= 8:
			w, m := binary.Uvarint(raw[:n])
			if m != n || w != v {
				t.Fatalf("decodeFlex(% x) = %d in %d bytes; uvarint %d in %d", raw, v, n, w, m)
			}
		default:
			want := new(big.Int)
			for i := 7; i >= 0; i-- {
				want.Lsh(want, 7).Add(want, big.NewInt(int64(raw[i]&0x7f)))
			}
			want.Add(want, new(big.Int).Lsh(big.NewInt(int64(raw[8])), 56))
			if n != 9 || want.Cmp(new(big.Int).SetUint64(v)) != 0 {
				t.Fatalf("decodeFlex(% x) = %d in %d bytes, want %v in 9", raw, v, n, want)
			}
		}
		pmixRecord(raw, rank, key) // must not panic
		if strings.IndexByte(key, 0) >= 0 {
			return // not a key a string can carry
		}
		ans := oracleAnswer(0, []oracleProc{{"ns", rank, []oracleKval{{key, pmixByteObject, boRaw(rec)}}}})
		got, err := pmixRecord(ans, rank, key)
		if err != nil || !bytes.Equal(got, rec) {
			t.Fatalf("pmixRecord(% x) = % x, %v; want % x", ans, got, err, rec)
		}
	})
}

// A server that is gone, or that drops the connection (OpenPMIx's answer
// to a process it does not know), yields an error that names the server
// and the process.
func TestPMIxRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no TCP on loopback: %v", err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Read the handshake, as OpenPMIx does, then hang up.
			var h [pmixHeaderBytes]byte
			if _, err := io.ReadFull(c, h[:]); err == nil {
				io.CopyN(io.Discard, c, int64(binary.NativeEndian.Uint32(h[8:])))
			}
			c.Close()
		}
	}()
	env := map[string]string{"PMIX_SERVER_URI41": "1.0;tcp4://" + ln.Addr().String(), "PMIX_NAMESPACE": "77", "PMIX_RANK": "1", "PMIX_SIZE": "2"}
	job := Job{Rank: 1, Size: 2, Launcher: "openmpi"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pmixExchange(ctx, job, []byte("r1"), envOf(env)); err == nil || !strings.Contains(err.Error(), "does not know 77.1") {
		t.Errorf("a server that hangs up: %v", err)
	}
	ln.Close()
	if _, err := pmixExchange(ctx, job, []byte("r1"), envOf(env)); err == nil || !strings.Contains(err.Error(), "PMIX_SERVER_URI41=1.0;tcp4://") {
		t.Errorf("no server: %v", err)
	}
	// A server of PMIx 4.0 or older names no PMIX_SERVER_URI41.
	env["PMIX_SERVER_URI4"] = env["PMIX_SERVER_URI41"]
	delete(env, "PMIX_SERVER_URI41")
	if _, err := pmixExchange(ctx, job, []byte("r1"), envOf(env)); err == nil || !strings.Contains(err.Error(), "predates PMIx 4.1 (PMIX_SERVER_URI4") {
		t.Errorf("an older server: %v", err)
	}
}
