package mx

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

func TestDisconnectAndAddrContext(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	if v, err := pr.a.AddrContext(pr.atob); err != nil || v != nil {
		t.Fatalf("a fresh address context is %v, %v; want nil", v, err)
	}
	if err := pr.a.SetAddrContext(pr.atob, "peer b"); err != nil {
		t.Fatal(err)
	}
	// The context belongs to the peer: any Addr naming it finds it, the
	// Source of a received message included.
	r, _ := pr.a.IRecv(nil, 1, ^uint64(0), nil)
	s, _ := pr.b.ISend(nil, pr.btoa, 1, nil)
	st := mustWait(t, r, 10*time.Second)
	mustWait(t, s, 10*time.Second)
	if v, _ := pr.a.AddrContext(st.Source); v != "peer b" {
		t.Fatalf("context through a status source: %v", v)
	}
	// A message from b waits unexpected, a large send to b is pending.
	u, _ := pr.b.ISend([][]byte{[]byte("left behind")}, pr.btoa, 2, nil)
	u.Forget()
	settle(t, pr.a, 1)
	big, _ := pr.a.ISend([][]byte{pattern(100000, 1)}, pr.atob, 3, nil)
	if err := pr.a.Disconnect(pr.atob); err != nil {
		t.Fatal(err)
	}
	if _, err := big.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrEndpointClosed) {
		t.Fatalf("pending send after disconnect: %v", err)
	}
	if _, ok := pr.a.IProbe(2, ^uint64(0)); ok {
		t.Fatal("disconnect kept the peer's unexpected message")
	}
	if _, err := pr.a.ISend(nil, pr.atob, 4, nil); !errors.Is(err, ErrBadEndpoint) {
		t.Fatalf("send after disconnect: %v", err)
	}
	if v, _ := pr.a.AddrContext(pr.atob); v != nil {
		t.Fatalf("context survived disconnect: %v", v)
	}
	if err := pr.a.Disconnect(pr.atob); !errors.Is(err, ErrBadEndpoint) {
		t.Fatalf("second disconnect: %v", err)
	}
	// Connecting again works both ways.
	addr, err := pr.a.Connect(testCtx(t, 10*time.Second), pr.bb.NICID(), pr.b.ID(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	r, _ = pr.b.IRecv(nil, 5, ^uint64(0), nil)
	s, _ = pr.a.ISend(nil, addr, 5, nil)
	mustWait(t, r, 10*time.Second)
	mustWait(t, s, 10*time.Second)
}

func TestRequestTimeout(t *testing.T) {
	opts := shortResends()
	opts.ResendMax = 100000 // only the request's own timeout can fail it
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	if err := pr.a.SetRequestTimeout(nil, 0); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("zero timeout: %v", err)
	}
	pr.bb.Close() // nobody answers any more
	s, _ := pr.a.ISend([][]byte{[]byte("lost")}, pr.atob, 1, nil)
	if err := pr.a.SetRequestTimeout(s, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(testCtx(t, 20*time.Second)); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send past its timeout: %v", err)
	}
	// The endpoint default applies to connects posted afterwards.
	if err := pr.a.SetRequestTimeout(nil, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c, _ := pr.a.IConnect(pr.bb.NICID(), 2, testKey, 0, nil)
	if _, err := c.Wait(testCtx(t, 20*time.Second)); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("connect past the endpoint timeout: %v", err)
	}
}

func TestProgressionControl(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	seen := make(chan uint64, 10)
	pr.b.SetUnexpectedHandler(func(m UnexpectedMessage) HandlerResult {
		seen <- m.Match
		return Finished
	})
	if err := pr.b.ReenableProgression(); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("reenable without disable: %v", err)
	}
	pr.b.DisableProgression()
	s, _ := pr.a.ISend([][]byte{[]byte("later")}, pr.atob, 7, nil)
	s.Forget()
	// Wait until the message reached b and was held back.
	deadline := time.Now().Add(10 * time.Second)
	for pr.b.Counters().Get(HeldProgressionOff) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the message never reached the endpoint")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case m := <-seen:
		t.Fatalf("the handler ran with progression disabled (message %d)", m)
	default:
	}
	if err := pr.b.ReenableProgression(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-seen:
		if m != 7 {
			t.Fatalf("handler got %d", m)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held message never reached the handler")
	}
}

func TestBoardsOfTheProcess(t *testing.T) {
	pr := newPair(t, loopbackOnly, fastOptions(), loopback.Faults{})
	in := GetInfo()
	if in.NICCount != len(in.NICIDs) || in.MaxEndpoints != MaxEndpoints {
		t.Fatalf("info %+v", in)
	}
	for _, b := range []*Board{pr.ba, pr.bb} {
		n, err := NICIDToBoardNumber(b.NICID())
		if err != nil {
			t.Fatal(err)
		}
		if nic, err := BoardNumberToNICID(n); err != nil || nic != b.NICID() || !slices.Contains(in.NICIDs, nic) {
			t.Fatalf("board %d: %v %v", n, nic, err)
		}
	}
	if _, err := BoardNumberToNICID(in.NICCount); !errors.Is(err, ErrBoardUnknown) {
		t.Fatalf("board past the end: %v", err)
	}
	na, _ := NICIDToBoardNumber(pr.ba.NICID())
	e, err := OpenEndpointOn(na, 7, testKey)
	if err != nil || e.Board() != pr.ba {
		t.Fatalf("open on board %d: %v", na, err)
	}
	e2, err := OpenEndpointOn(AnyNIC, 7, testKey) // busy on the first board it tries
	if err != nil || e2.Board() == e.Board() {
		t.Fatalf("open on any NIC: %v", err)
	}
	if _, err := OpenEndpointOn(in.NICCount+5, 7, testKey); !errors.Is(err, ErrBoardUnknown) {
		t.Fatalf("open on a missing board: %v", err)
	}
}

func TestReturnCodes(t *testing.T) {
	cases := []struct {
		err    error
		ret    ReturnCode
		status StatusCode
	}{
		{nil, Success, StatusSuccess},
		{fmt.Errorf("wait: %w", ErrTruncated), Success, StatusTruncated},
		{&OpError{Op: "connect", Err: ErrBadKey}, BadConnectionKey, StatusBadKey},
		{ErrUnreachable, ConnectionFailed, StatusEndpointUnreachable},
		{ErrNoResources, NoResources, StatusNoResources},
		{ErrBadMatchMask, BadMatchMask, StatusRejected},
		{ErrTimeout, Timeout, StatusTimeout},
		{errors.New("other"), Failure, StatusAborted},
	}
	for _, c := range cases {
		if got := ReturnCodeOf(c.err); got != c.ret {
			t.Errorf("ReturnCodeOf(%v) = %v, want %v", c.err, got, c.ret)
		}
		if got := StatusCodeOf(c.err); got != c.status {
			t.Errorf("StatusCodeOf(%v) = %v, want %v", c.err, got, c.status)
		}
	}
	if BadConnectionKey.String() != "MX_BAD_CONNECTION_KEY" || int(BadConnectionKey) != 34 ||
		StatusEndpointUnreachable.String() != "MX_STATUS_ENDPOINT_UNREACHABLE" {
		t.Error("names")
	}
}

func TestHostQueryAndRaw(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	names := NewNames()
	oa, ob := fastOptions(), fastOptions()
	oa.Names, oa.Hostname = names, "alpha:0"
	ob.Hostname = "beta:0"
	ba, err := NewBoard(w.a, oa)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := NewBoard(w.b, ob)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ba.Close(); bb.Close(); w.close() })
	name, err := ba.QueryHostname(testCtx(t, 10*time.Second), bb.NICID())
	if err != nil || name != "beta:0" {
		t.Fatalf("host query: %q %v", name, err)
	}
	if nic, err := names.HostnameToNICID(testCtx(t, time.Second), "beta:0"); err != nil || nic != bb.NICID() {
		t.Fatalf("the reply was not registered: %v %v", nic, err)
	}
	if err := ba.SendRaw(bb.NICID(), []byte("mapper")); err != nil {
		t.Fatal(err)
	}
	nic, data, err := bb.RecvRaw(testCtx(t, 10*time.Second))
	if err != nil || nic != ba.NICID() || string(data[:6]) != "mapper" {
		t.Fatalf("raw: %v %q %v", nic, data, err)
	}
	if _, _, err := bb.RecvRaw(testCtx(t, 10*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("raw on an empty queue: %v", err)
	}
}

// A wrong key on the first contact between two gomx boards is refused with
// ErrBadKey (the reply is sealed as the requester asked, although the
// replier learns nothing from a refused request).
func TestBadKeyFirstContact(t *testing.T) {
	w := newLoopbackWire(t, loopback.Faults{})
	ba, err := NewBoard(w.a, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	bb, err := NewBoard(w.b, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ba.Close(); bb.Close(); w.close() })
	ea, _ := ba.OpenEndpoint(1, testKey)
	if _, err := bb.OpenEndpoint(2, testKey); err != nil {
		t.Fatal(err)
	}
	if _, err := ea.Connect(testCtx(t, 10*time.Second), bb.NICID(), 2, testKey^1); !errors.Is(err, ErrBadKey) {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := ea.Connect(testCtx(t, 10*time.Second), bb.NICID(), 9, testKey); !errors.Is(err, ErrBadEndpoint) {
		t.Fatalf("missing endpoint: %v", err)
	}
}
