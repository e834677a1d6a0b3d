package nictest

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
)

// FlexOffset is where the suite's flex rules look: the first two bytes of
// a UDP payload after an IPv4 header without options.
const FlexOffset = 14 + 20 + 8

// UDPFrame writes an IPv4/UDP frame of size bytes (at least 60) from src
// to dst into b and returns it: destination port dport, the 16-bit word
// flex at FlexOffset, then seq. The IP header checksum is right; the UDP
// checksum is 0 (none).
func UDPFrame(b []byte, dst, src nicdrv.MAC, dport, flex uint16, seq uint64, size int) []byte {
	b = b[:size]
	clear(b)
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	copy(ip[12:20], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(0, ip[:20])))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-34))
	binary.BigEndian.PutUint16(b[FlexOffset:], flex)
	binary.BigEndian.PutUint64(b[FlexOffset+2:], seq)
	return b
}

// arrival is a frame received on some queue.
type arrival struct {
	queue int
	rule  nicdrv.RuleID
	frame []byte
}

// recvAny waits for one frame on any queue of n.
func recvAny(t *testing.T, n nicdrv.NIC) (arrival, bool) {
	t.Helper()
	rx := make([]*nicdrv.Buffer, 1)
	deadline := time.Now().Add(hang)
	for time.Now().Before(deadline) {
		for q := 0; q < n.Info().Queues; q++ {
			k, err := n.RxBatch(q, rx)
			if err != nil {
				t.Fatal(err)
			}
			if k == 1 {
				a := arrival{queue: q, rule: rx[0].Rule, frame: rx[0].AppendFrame(nil)}
				if rx[0].Queue != q {
					t.Errorf("a frame received on queue %d says queue %d", q, rx[0].Queue)
				}
				_ = n.Pool(q).Free(rx[0])
				return a, true
			}
		}
	}
	return arrival{}, false
}

// sendFrame sends one frame built by fill from n on queue 0.
func sendFrame(t *testing.T, n nicdrv.NIC, fill func(b []byte) []byte) {
	t.Helper()
	bufs := alloc(t, n, 1)
	fr := fill(bufs[0].SetLen(2048))
	bufs[0].SetLen(len(fr))
	sendAll(t, n, 0, bufs)
}

// ruleCase is one rule kind as the suite tries it: the rule (its Queue
// set later), and a frame it matches and one it does not.
type ruleCase struct {
	rule          nicdrv.Rule
	match, differ func(b []byte) []byte
	// ip: the frames are IP, so RSS may place the one that does not
	// match on any queue; a non-IP frame no rule takes lands on queue 0.
	ip bool
}

// ruleCases are the cases of every rule kind, for frames from a to b.
func ruleCases(a, b nicdrv.NIC) []ruleCase {
	other := nicdrv.MAC{0x02, 0, 0, 0, 0, 0x77}
	return []ruleCase{
		{rule: nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: EtherType},
			match: func(fr []byte) []byte { return Frame(fr, b.MAC(), a.MAC(), 1, 80) },
			differ: func(fr []byte) []byte {
				fr = Frame(fr, b.MAC(), a.MAC(), 2, 80)
				binary.BigEndian.PutUint16(fr[12:], EtherType+1)
				return fr
			}},
		{rule: nicdrv.Rule{Kind: nicdrv.RuleDestMAC, MAC: other},
			match:  func(fr []byte) []byte { return Frame(fr, other, a.MAC(), 3, 80) },
			differ: func(fr []byte) []byte { return Frame(fr, b.MAC(), a.MAC(), 4, 80) }},
		{rule: nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 7000}, ip: true,
			match:  func(fr []byte) []byte { return UDPFrame(fr, b.MAC(), a.MAC(), 7000, 0, 5, 100) },
			differ: func(fr []byte) []byte { return UDPFrame(fr, b.MAC(), a.MAC(), 7001, 0, 6, 100) }},
		{rule: nicdrv.Rule{Kind: nicdrv.RuleFlex, Offset: FlexOffset, Flex: 0x4D58}, ip: true,
			match:  func(fr []byte) []byte { return UDPFrame(fr, b.MAC(), a.MAC(), 9000, 0x4D58, 7, 100) },
			differ: func(fr []byte) []byte { return UDPFrame(fr, b.MAC(), a.MAC(), 9000, 0x4D59, 8, 100) }},
		{rule: nicdrv.Rule{Kind: nicdrv.RuleByte, Offset: 16, Value: 3},
			match: func(fr []byte) []byte { fr = Frame(fr, b.MAC(), a.MAC(), 9, 80); fr[16] = 3; return fr },
			differ: func(fr []byte) []byte {
				fr = Frame(fr, b.MAC(), a.MAC(), 10, 80)
				fr[16] = 4
				return fr
			}},
	}
}

// rules checks every kind on the last queue: installed, matching frames
// land there (with the rule's ID when the NIC reports one), others do not
// carry it; removed, it stops matching.
func (s *suite) rules(t *testing.T) {
	r := s.rig(t, Config{Queues: 2})
	a, b := r.NICs[0], r.NICs[1]
	last := b.Info().Queues - 1
	for _, c := range ruleCases(a, b) {
		t.Run(c.rule.Kind.String(), func(t *testing.T) {
			rule := c.rule
			rule.Queue = last
			id, err := b.AddRule(rule)
			if err != nil && errors.Is(err, nicdrv.ErrNotSupported) && rule.Kind == nicdrv.RuleDestMAC {
				rule.Queue = 0 // accepted to queue 0 only, without VMDq
				id, err = b.AddRule(rule)
			}
			capacity := b.RuleCapacity(rule.Kind)
			switch {
			case capacity == 0 && !errors.Is(err, nicdrv.ErrNotSupported):
				t.Fatalf("AddRule(%v) on a NIC that holds none: %v, want ErrNotSupported", rule, err)
			case capacity == 0:
				return
			case err != nil:
				t.Fatalf("AddRule(%v) on a NIC that holds %d: %v", rule, capacity, err)
			case id == 0:
				t.Fatalf("AddRule(%v) returned the zero RuleID", rule)
			}
			sendFrame(t, a, c.match)
			got, ok := recvAny(t, b)
			switch {
			case !ok:
				t.Fatalf("a frame matching %v did not arrive", rule)
			case got.queue != rule.Queue:
				t.Errorf("a frame matching %v arrived on queue %d", rule, got.queue)
			case got.rule != 0 && got.rule != id:
				t.Errorf("a frame matching %v says rule %#x, want %#x", rule, got.rule, id)
			}
			check := func(what string, fill func([]byte) []byte) {
				t.Helper()
				if rule.Kind == nicdrv.RuleDestMAC && what != "the frame that does not match" {
					absent(t, a, b, what+" for "+rule.MAC.String())
					return
				}
				sendFrame(t, a, fill)
				got, ok := recvAny(t, b)
				switch {
				case !ok:
					t.Fatalf("%s (%v) did not arrive", what, rule)
				case got.rule == id:
					t.Errorf("%s says rule %#x, which it does not match", what, id)
				case !c.ip && got.queue != 0:
					t.Errorf("%s (not IP, no rule) arrived on queue %d, want 0", what, got.queue)
				}
			}
			check("the frame that does not match", c.differ)
			if err := b.RemoveRule(id); err != nil {
				t.Fatalf("RemoveRule(%v): %v", rule, err)
			}
			check("a frame of the removed rule", c.match)
			if err := b.RemoveRule(id); !errors.Is(err, nicdrv.ErrNoRule) {
				t.Errorf("RemoveRule of a removed rule: %v, want ErrNoRule", err)
			}
		})
	}
	if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleEtherType, EtherType: EtherType, Queue: 99}); !errors.Is(err, nicdrv.ErrBadQueue) && !errors.Is(err, nicdrv.ErrNotSupported) {
		t.Errorf("rule to queue 99: %v, want ErrBadQueue", err)
	}
	if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleFlex, Offset: 13, Queue: 0}); err == nil {
		t.Error("a flex rule at an odd offset was accepted")
	}
}

// nthRule is rule i of kind k for a table-filling test: all distinct, all
// to queue 0.
func nthRule(k nicdrv.RuleKind, i int) nicdrv.Rule {
	r := nicdrv.Rule{Kind: k}
	switch k {
	case nicdrv.RuleEtherType:
		r.EtherType = uint16(0x9000 + i)
	case nicdrv.RuleDestMAC:
		r.MAC = nicdrv.MAC{0x02, 0xAA, 0, 0, byte(i >> 8), byte(i)}
	case nicdrv.RuleUDPDestPort:
		r.Port = uint16(10000 + i)
	case nicdrv.RuleFlex:
		r.Offset, r.Flex = FlexOffset, uint16(i)
	case nicdrv.RuleByte:
		r.Offset, r.Value = 16, byte(i)
	}
	return r
}

// ruleTableFull fills each kind's table: RuleCapacity rules go in, the next
// is refused with ErrTableFull, and once one is removed another goes in.
func (s *suite) ruleTableFull(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	b := r.NICs[1]
	for _, k := range nicdrv.RuleKinds {
		capacity := b.RuleCapacity(k)
		if capacity == 0 || capacity > 1<<14 {
			continue
		}
		t.Run(k.String(), func(t *testing.T) {
			ids := make([]nicdrv.RuleID, 0, capacity)
			defer func() {
				for _, id := range ids {
					if err := b.RemoveRule(id); err != nil {
						t.Errorf("RemoveRule: %v", err)
					}
				}
			}()
			for i := range capacity {
				id, err := b.AddRule(nthRule(k, i))
				if err != nil {
					t.Fatalf("rule %d of %d (%v): %v", i+1, capacity, nthRule(k, i), err)
				}
				ids = append(ids, id)
			}
			_, err := b.AddRule(nthRule(k, capacity))
			if !errors.Is(err, nicdrv.ErrTableFull) {
				t.Fatalf("rule %d on a table of %d: %v, want ErrTableFull", capacity+1, capacity, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "in use") && !strings.Contains(msg, "full") {
				t.Errorf("the refusal does not say the table is full: %q", msg)
			}
			if err := b.RemoveRule(ids[0]); err != nil {
				t.Fatal(err)
			}
			ids = ids[1:]
			id, err := b.AddRule(nthRule(k, capacity))
			if err != nil {
				t.Fatalf("a rule after one was removed from the full table: %v", err)
			}
			ids = append(ids, id)
		})
	}
}
