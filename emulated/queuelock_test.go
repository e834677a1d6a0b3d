package emulated

import (
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"unsafe"
)

// A queue's reader holds its queue's shard alone (queues queueShards apart
// share one), a reader that is no queue's holds the last, and a writer
// holds every shard; a lock of one shard is one RWMutex for all.
func TestQueueLockShards(t *testing.T) {
	held := func(l *queueLock) (w []bool) {
		for i := range l.shards {
			ok := l.shards[i].TryLock()
			if ok {
				l.shards[i].Unlock()
			}
			w = append(w, !ok)
		}
		return w
	}
	only := func(n, i int) []bool {
		w := make([]bool, n)
		w[i] = true
		return w
	}
	l := newQueueLock(queueShards + 1)
	for q := range 2*queueShards + 1 {
		l.queue(q).RLock()
		if got, want := held(&l), only(queueShards+1, q%queueShards); !slices.Equal(got, want) {
			t.Errorf("queue %d's reader holds shards %v, want %v", q, got, want)
		}
		l.queue(q).RUnlock()
	}
	l.RLock()
	if got, want := held(&l), only(queueShards+1, queueShards); !slices.Equal(got, want) {
		t.Errorf("a reader of no queue holds shards %v, want %v", got, want)
	}
	l.RUnlock()
	l.Lock()
	for i := range l.shards {
		if l.shards[i].TryRLock() {
			t.Errorf("shard %d readable under the writer", i)
			l.shards[i].RUnlock()
		}
	}
	l.Unlock()
	if got := held(&l); !slices.Equal(got, make([]bool, queueShards+1)) {
		t.Errorf("shards %v held after the writer left", got)
	}

	one := newQueueLock(1)
	one.queue(5).RLock()
	one.RLock()
	if got := held(&one); !slices.Equal(got, []bool{true}) {
		t.Errorf("a one-shard lock's readers hold %v", got)
	}
	one.RUnlock()
	one.queue(5).RUnlock()
}

// A writer excludes the readers of every queue: readers of many queues
// read what a writer writes meanwhile, and the race detector sees no
// access unordered. The test has teeth only under -race: without it, a
// shard the writer skipped would rarely let a reader see a write half
// done.
func TestQueueLockWriterExcludesEveryQueue(t *testing.T) {
	l := newQueueLock(queueShards + 1)
	var v [4]int // what the writer writes whole under Lock
	var wg sync.WaitGroup
	for q := range 2*queueShards + 1 {
		wg.Go(func() {
			for range 200 {
				if q == 2*queueShards {
					l.RLock()
				} else {
					l.queue(q).RLock()
				}
				if v[0] != v[1] || v[1] != v[2] || v[2] != v[3] {
					t.Errorf("queue %d read a write half done: %v", q, v)
				}
				if q == 2*queueShards {
					l.RUnlock()
				} else {
					l.queue(q).RUnlock()
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			l.Lock()
			for k := range v {
				v[k] = i
			}
			l.Unlock()
		}
	})
	wg.Wait()
}

// A shard is 128 bytes, so no two shards' RWMutexes share a cache line.
func TestLockShardSize(t *testing.T) {
	if got := unsafe.Sizeof(lockShard{}); got != 128 {
		t.Errorf("lockShard is %d bytes, want 128", got)
	}
}

// flowFrame is an Ethernet frame of etherType carrying an IPv4 header of
// ihl words, protocol proto and fragment field frag, then a transport
// header with destination port dport (the frame cut to n bytes if n > 0).
func flowFrame(etherType uint16, ihl int, proto uint8, frag uint16, dport uint16, n int) []byte {
	fr := make([]byte, 14+ihl*4+8)
	binary.BigEndian.PutUint16(fr[12:], etherType)
	fr[14] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(fr[14+6:], frag)
	fr[14+9] = proto
	binary.BigEndian.PutUint16(fr[14+ihl*4:], 1234) // source port
	binary.BigEndian.PutUint16(fr[14+ihl*4+2:], dport)
	if n > 0 {
		fr = fr[:n]
	}
	return fr
}

// A received frame reads the shard its UDP or TCP destination port picks
// when it is an unfragmented IPv4 datagram or a fragmented one's head,
// wherever its options end; any other frame reads shard 0.
func TestFlowShard(t *testing.T) {
	const udp, tcp, icmp = 17, 6, 1
	untagged := flowFrame(0x0800, 5, udp, 0, 40001, 0)
	vlan := slices.Concat(untagged[:12], []byte{0x81, 0x00, 0x00, 0x05}, untagged[12:])
	for _, c := range []struct {
		name string
		fr   []byte
		want int
	}{
		{"IPv4 UDP", flowFrame(0x0800, 5, udp, 0, 40003, 0), 40003},
		{"IPv4 TCP", flowFrame(0x0800, 5, tcp, 0, 80, 0), 80},
		{"first fragment", flowFrame(0x0800, 5, udp, 0x2000, 40002, 0), 40002},
		{"later fragment", flowFrame(0x0800, 5, udp, 0x2000|185, 40002, 0), 0},
		{"last fragment", flowFrame(0x0800, 5, udp, 185, 40002, 0), 0},
		{"IHL 6", flowFrame(0x0800, 6, udp, 0, 40005, 0), 40005},
		{"IHL 15", flowFrame(0x0800, 15, tcp, 0, 443, 0), 443},
		{"ICMP", flowFrame(0x0800, 5, icmp, 0, 40001, 0), 0},
		{"VLAN-tagged", vlan, 0},
		{"IPv6", flowFrame(0x86DD, 5, udp, 0, 40001, 0), 0},
		{"ARP", flowFrame(0x0806, 5, udp, 0, 40001, 0), 0},
		{"IPv4 EtherType, version 6", func() []byte {
			fr := flowFrame(0x0800, 5, udp, 0, 40001, 0)
			fr[14] = 0x65
			return fr
		}(), 0},
		{"short of an IPv4 header", flowFrame(0x0800, 5, udp, 0, 40001, 14+19), 0},
		{"short of the port", flowFrame(0x0800, 6, udp, 0, 40001, 14+24+3), 0},
		{"port's last byte", flowFrame(0x0800, 6, udp, 0, 40001, 14+24+4), 40001},
		{"empty", nil, 0},
	} {
		if got := flowShard(c.fr); got != c.want {
			t.Errorf("%s: shard %d, want %d", c.name, got, c.want)
		}
	}
}

// flowShard reads any bytes off the wire without panicking, picks a port
// (0-65535) and so a shard of the lock, and picks 0 for a frame too short
// for an IPv4 header or other than IPv4.
func FuzzFlowShard(f *testing.F) {
	f.Add(flowFrame(0x0800, 5, 17, 0, 40003, 0))
	f.Add(flowFrame(0x0800, 15, 6, 0, 80, 0))
	f.Add(flowFrame(0x0800, 5, 17, 185, 40002, 0))
	f.Add(flowFrame(0x8100, 5, 17, 0, 40001, 0))
	f.Add([]byte{})
	l := newQueueLock(queueShards + 1)
	f.Fuzz(func(t *testing.T, fr []byte) {
		s := flowShard(fr)
		if s < 0 || s > 0xFFFF {
			t.Fatalf("shard %d for % x: not a port", s, fr)
		}
		if s != 0 && (len(fr) < 14+20 || fr[12] != 0x08 || fr[13] != 0x00) {
			t.Fatalf("shard %d for a %d-byte frame, not IPv4 or too short: % x", s, len(fr), fr)
		}
		_ = l.queue(s) // a shard of the lock, not out of its range
	})
}
