package launch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakePMIx is a PMIx server for a job of size processes in namespace ns,
// as OpenPMIx's connection handler and switchyard answer a simple client
// (ptl_base_connection_hdlr.c, pmix_server.c): it checks the handshake,
// keeps what each process commits, holds every fence until all size
// processes are in it, and answers gets with the committer's kvals. It
// parses with Go's own varints, not this package's decoder, and before
// every answer sends a message of another tag (an event the client did
// not ask for), which the client must skip.
type fakePMIx struct {
	t    *testing.T
	ln   net.Listener
	ns   string
	size int

	mu      sync.Mutex
	records map[uint32][]byte
	fenced  int
	fence   chan struct{} // closed when all size processes are in the fence
	final   int
	done    chan struct{} // closed when the test ends: frees fence waits
}

func newFakePMIx(t *testing.T, ns string, size int) *fakePMIx {
	s := &fakePMIx{t: t, ns: ns, size: size, records: map[uint32][]byte{}, fence: make(chan struct{})}
	s.ln, s.done = fakeServer(t, s.serve)
	return s
}

func (s *fakePMIx) env(rank int) map[string]string {
	return map[string]string{"PMIX_SERVER_URI41": "srv.0;tcp4://" + s.ln.Addr().String(),
		"PMIX_NAMESPACE": s.ns, "PMIX_RANK": fmt.Sprint(rank)}
}

// oracleReader reads what the client packs with Go's varints.
type oracleReader struct{ b []byte }

func (r *oracleReader) u() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		panic("bad varint")
	}
	r.b = r.b[n:]
	return v
}

func (r *oracleReader) s() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		panic("bad varint")
	}
	r.b = r.b[n:]
	return v
}

func (r *oracleReader) raw(n int) []byte { v := r.b[:n]; r.b = r.b[n:]; return v }
func (r *oracleReader) str() string      { return strings.TrimSuffix(string(r.raw(int(r.s()))), "\x00") }
func (r *oracleReader) cstr() string {
	i := bytes.IndexByte(r.b, 0)
	v := string(r.b[:i])
	r.b = r.b[i+1:]
	return v
}

func (s *fakePMIx) serve(c net.Conn) {
	defer c.Close()
	defer func() {
		if p := recover(); p != nil {
			s.t.Errorf("fake PMIx server: a malformed message: %v", p)
		}
	}()
	var h [16]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return
	}
	body := make([]byte, binary.NativeEndian.Uint32(h[8:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return
	}
	r := oracleReader{body}
	psec, credLen := r.cstr(), binary.BigEndian.Uint32(r.raw(4))
	r.raw(int(credLen))
	flag := r.raw(1)[0]
	ns, rank := r.cstr(), binary.BigEndian.Uint32(r.raw(4))
	version, bfrops, btype, gds := r.cstr(), r.cstr(), r.raw(1)[0], r.cstr()
	if psec != "native" || credLen != 8 || flag != 0 || ns != s.ns || int(rank) >= s.size ||
		!strings.HasPrefix(version, "4.") || bfrops != "v41" || btype != 1 || gds != "hash" || len(r.b) != 0 {
		s.t.Errorf("handshake %q %d %d %q.%d %q %q %d %q (+%d bytes)", psec, credLen, flag, ns, rank, version, bfrops, btype, gds, len(r.b))
		return // OpenPMIx hangs up
	}
	c.Write(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 0), 7+rank))
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		if binary.BigEndian.Uint32(h[:]) != 7+rank {
			s.t.Errorf("rank %d: a message from index %d", rank, binary.BigEndian.Uint32(h[:]))
		}
		tag := binary.BigEndian.Uint32(h[4:])
		msg := make([]byte, binary.BigEndian.Uint32(h[8:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		r := oracleReader{msg}
		r.s()
		var answer []byte
		switch cmd := r.raw(1)[0]; cmd {
		case pmixCmdCommit:
			r.s()
			scope := r.raw(1)[0]
			r.s()
			btype, n := r.raw(1)[0], r.u()
			kv := oracleReader{r.raw(int(n))}
			kv.s()
			key, typ := kv.str(), kv.u()
			rec := kv.raw(int(kv.u()))
			if scope != pmixGlobal || btype != 1 || key != pmixRecordKey || typ != pmixByteObject || len(kv.b) != 0 || len(r.b) != 0 {
				s.t.Errorf("rank %d commit: scope %d, buffer type %d, %q of type %d", rank, scope, btype, key, typ)
			}
			s.mu.Lock()
			s.records[rank] = bytes.Clone(rec)
			s.mu.Unlock()
			answer = oracleAnswer(0, nil)
		case pmixCmdFence:
			r.s()
			nprocs := r.u()
			r.s()
			ns, who := r.str(), r.u()
			r.s()
			ninfo := r.u()
			r.s()
			key, flags, typ, v := r.str(), r.u(), r.u(), r.raw(1)[0]
			if nprocs != 1 || ns != s.ns || who != pmixRankWildcard || ninfo != 1 || key != "pmix.collect" || flags != 0 || typ != pmixBool || v != 1 || len(r.b) != 0 {
				s.t.Errorf("rank %d fence: %d procs %q.%d, %d infos %q %d %d %d", rank, nprocs, ns, who, ninfo, key, flags, typ, v)
			}
			s.mu.Lock()
			if s.fenced++; s.fenced == s.size {
				close(s.fence)
			}
			s.mu.Unlock()
			select {
			case <-s.fence:
			case <-s.done:
				return
			}
			answer = oracleAnswer(0, nil)
		case pmixCmdGet:
			r.s()
			ns := r.str()
			r.s()
			who := uint32(r.u())
			r.s()
			ninfo := r.u()
			r.s()
			key := r.str()
			if ns != s.ns || ninfo != 0 || key != pmixRecordKey || len(r.b) != 0 {
				s.t.Errorf("rank %d get: %q.%d, %d infos, %q", rank, ns, who, ninfo, key)
			}
			s.mu.Lock()
			rec, ok := s.records[who]
			s.mu.Unlock()
			if !ok {
				answer = oracleAnswer(-46, nil) // PMIX_ERR_NOT_FOUND
				break
			}
			// The committer's kvals, a job-level one among them.
			answer = oracleAnswer(0, []oracleProc{{s.ns, who, []oracleKval{
				{"pmix.lrank", pmixUint16, binary.AppendUvarint(nil, 1)},
				{pmixRecordKey, pmixByteObject, boRaw(rec)},
			}}})
		case pmixCmdFinalize:
			s.mu.Lock()
			s.final++
			s.mu.Unlock()
			answer = oracleAnswer(0, nil)
		default:
			s.t.Errorf("rank %d: command %d", rank, cmd)
			return
		}
		// An event first, under tag 0, then the answer.
		for _, m := range []struct {
			tag  uint32
			body []byte
		}{{0, []byte{0x02, 0x01}}, {tag, answer}} {
			out := binary.BigEndian.AppendUint32(nil, 0)
			out = binary.BigEndian.AppendUint32(out, m.tag)
			out = binary.BigEndian.AppendUint32(out, uint32(len(m.body)))
			out = binary.BigEndian.AppendUint32(out, 0)
			c.Write(append(out, m.body...))
		}
	}
}

// TestPMIxExchange: ranks trade records through a PMIx server written
// from the protocol (fakePMIx): every rank gets every record, empty and
// large ones too, and each finalizes; a rank whose peers never come ends
// with its context and says so.
func TestPMIxExchange(t *testing.T) {
	const size = 4
	s := newFakePMIx(t, "job7", size)
	recs := [][]byte{[]byte("zero"), {}, bytes.Repeat([]byte{0xa5}, MaxRecord), []byte("three")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tables := make([][][]byte, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tables[r], errs[r] = pmixExchange(ctx, Job{Rank: r, Size: size, Launcher: "openmpi"}, recs[r], envOf(s.env(r)))
		}()
	}
	wg.Wait()
	for r := range size {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for q := range size {
			if !bytes.Equal(tables[r][q], recs[q]) {
				t.Fatalf("rank %d: record of rank %d is %d bytes, want %d", r, q, len(tables[r][q]), len(recs[q]))
			}
		}
	}
	s.mu.Lock()
	if s.final != size {
		t.Errorf("%d ranks finalized, want %d", s.final, size)
	}
	s.mu.Unlock()
	// Alone in a job of two: the fence never ends, the context does.
	lone := newFakePMIx(t, "job8", 2)
	short, c2 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer c2()
	if _, err := pmixExchange(short, Job{Rank: 0, Size: 2}, nil, envOf(lone.env(0))); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "fence") {
		t.Errorf("alone: %v", err)
	}
	// The launcher's rank and PMIx's differ: refused before anything is
	// committed.
	if _, err := pmixExchange(ctx, Job{Rank: 1, Size: 2}, nil, envOf(lone.env(0))); err == nil || !strings.Contains(err.Error(), "PMIX_RANK=0") {
		t.Errorf("rank mismatch: %v", err)
	}
	// A record too large for the exchange.
	if _, err := pmixExchange(ctx, Job{Rank: 0, Size: 2}, make([]byte, MaxRecord+1), envOf(lone.env(0))); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("large record: %v", err)
	}
}
