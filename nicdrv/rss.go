package nicdrv

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
)

// RSS describes how a NIC spreads received IPv4 frames over its queues by
// receive-side scaling, so that software can predict where a datagram
// lands: the Toeplitz hash (Microsoft's RSS definition) of the frame's
// source and destination addresses, and of its ports where the NIC hashes
// them, indexes a redirection table whose entry names the queue.
//
// A NIC that steers only by RSS (the 82574) has no rule for a UDP port,
// but a receiver that may choose its own address can still pick one whose
// datagrams land on a wanted queue. Whether that holds for every sender
// depends on the key: the hash is linear in its input bits, so the
// redirection index of a datagram is the index its destination alone
// gives, XOR a contribution of its source. [RSS.DestQueue] reports the
// queue only when no source can move the index off entries of that queue.
type RSS struct {
	// Key is the Toeplitz key the NIC hashes with (40 bytes on the
	// 82574 and 82599).
	Key []byte
	// Table is the redirection table: the queue of each entry. Its
	// length is a power of two; a hash selects entry hash & (len-1).
	Table []int
	// UDPPorts tells that UDP/IPv4 datagrams are hashed with their ports
	// (source port then destination port, after the addresses), as TCP
	// segments are; false means by their addresses alone (the 82574).
	UDPPorts bool
}

// Check reports whether r is complete: a key long enough for an IPv4 hash
// with ports and a redirection table whose length is a power of two.
func (r *RSS) Check() error {
	switch {
	case len(r.Key) < 12+4:
		return fmt.Errorf("nicdrv: RSS key of %d bytes: want at least 16 (a 12-byte IPv4 input plus the 4-byte window)", len(r.Key))
	case len(r.Table) == 0 || bits.OnesCount(uint(len(r.Table))) != 1:
		return fmt.Errorf("nicdrv: RSS redirection table of %d entries: want a power of two", len(r.Table))
	}
	return nil
}

// Toeplitz is Microsoft's RSS hash of input under key: for every bit of
// input that is set, from the first byte's most significant bit on, the
// 32 bits of key starting at that bit's position are XORed into the
// result. key must hold at least len(input)+4 bytes.
func Toeplitz(key, input []byte) uint32 {
	var h uint32
	// window is key bits [pos, pos+32) with the next byte's bits queued
	// in the low part of a 64-bit register.
	window := uint64(0)
	for i := 0; i < 8 && i < len(key); i++ {
		window |= uint64(key[i]) << (56 - 8*i)
	}
	for i, b := range input {
		for bit := 7; bit >= 0; bit-- {
			if b>>bit&1 != 0 {
				h ^= uint32(window >> 32)
			}
			window <<= 1
		}
		// Bring in the key byte that starts 8 bytes after this one.
		if j := i + 8; j < len(key) {
			window |= uint64(key[j])
		}
	}
	return h
}

// ipv4Input lays out the hash input of an IPv4 datagram: source address,
// destination address and, with ports, source port then destination port,
// all in network order.
func ipv4Input(src, dst netip.AddrPort, ports bool) []byte {
	in := make([]byte, 0, 12)
	s, d := src.Addr().Unmap().As4(), dst.Addr().Unmap().As4()
	in = append(append(in, s[:]...), d[:]...)
	if ports {
		in = append(in, byte(src.Port()>>8), byte(src.Port()), byte(dst.Port()>>8), byte(dst.Port()))
	}
	return in
}

// HashUDP4 is the hash the NIC computes for a UDP/IPv4 datagram from src to
// dst.
func (r *RSS) HashUDP4(src, dst netip.AddrPort) uint32 {
	return Toeplitz(r.Key, ipv4Input(src, dst, r.UDPPorts))
}

// QueueUDP4 is the queue the NIC puts a UDP/IPv4 datagram from src to dst
// on.
func (r *RSS) QueueUDP4(src, dst netip.AddrPort) int {
	return r.Table[r.HashUDP4(src, dst)&uint32(len(r.Table)-1)]
}

// errSenderDependent is DestQueue's answer when the source moves the index.
var errSenderDependent = errors.New("the sender's address moves its datagrams between queues")

// DestQueue returns the queue every UDP/IPv4 datagram to dst lands on,
// whatever its source address and port, or an error when the source can
// move it to another queue under this key and table. The index is
// index(dst) XOR the source's contribution, and the contributions of all
// sources form a linear space spanned by those of single source bits, so
// DestQueue checks that every entry reachable that way names one queue.
func (r *RSS) DestQueue(dst netip.AddrPort) (int, error) {
	if err := r.Check(); err != nil {
		return 0, err
	}
	mask := uint32(len(r.Table) - 1)
	zero := netip.AddrPortFrom(netip.AddrFrom4([4]byte{}), 0)
	base := r.HashUDP4(zero, dst) & mask
	// A basis of the source contributions to the index (Gaussian
	// elimination over GF(2), keyed by each vector's top bit).
	var basis [32]uint32
	srcBits := 32
	if r.UDPPorts {
		srcBits = 48
	}
	for b := range srcBits {
		// Source address bits come first in the input; the source
		// port's, when hashed, after both addresses.
		var in [12]byte
		at := b
		if b >= 32 {
			at = 64 + b - 32
		}
		in[at/8] = 0x80 >> (at % 8)
		n := 8
		if r.UDPPorts {
			n = 12
		}
		v := Toeplitz(r.Key, in[:n]) & mask
		for v != 0 {
			top := 31 - bits.LeadingZeros32(v)
			if basis[top] == 0 {
				basis[top] = v
				break
			}
			v ^= basis[top]
		}
	}
	// Every index base XOR (a combination of the basis) must name the
	// same queue. The span holds at most len(Table) vectors.
	span := []uint32{0}
	for _, v := range basis {
		if v == 0 {
			continue
		}
		for _, s := range span[:len(span):len(span)] {
			span = append(span, s^v)
		}
	}
	q := r.Table[base]
	for _, s := range span {
		if r.Table[base^s] != q {
			return 0, fmt.Errorf("nicdrv: RSS cannot steer datagrams to %v: %w (the key lets %d source bits reach the redirection index)", dst.Addr(), errSenderDependent, bits.Len(uint(len(span)))-1)
		}
	}
	return q, nil
}
