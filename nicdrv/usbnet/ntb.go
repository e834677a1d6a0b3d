package usbnet

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// NCM 1.0 §3: the 16-bit NCM Transfer Header (NTH16) and Datagram Pointer
// Table (NDP16). Every field is little-endian.
//
//	NTH16 (12 bytes): dwSignature "NCMH", wHeaderLength 12, wSequence,
//	                  wBlockLength, wNdpIndex
//	NDP16 (>= 16):    dwSignature "NCM0", wLength, wNextNdpIndex, then
//	                  (wDatagramIndex, wDatagramLength) pairs ended by a
//	                  (0, 0) pair
const (
	nth16Sig    = 0x484D434E // "NCMH"
	ndp16Sig    = 0x304D434E // "NCM0": datagrams without CRC
	nth16Len    = 12
	ndp16Header = 8
	ndp16MinLen = 16 // header, one entry, the terminator
)

// ErrBadNTB means a received NTB contradicts itself: a signature, length or
// offset that does not fit the block.
var ErrBadNTB = errors.New("malformed NCM transfer block")

// NTBParams is the device's answer to GET_NTB_PARAMETERS (NCM 1.0 §6.2.1),
// the 28-byte NTB parameter structure.
type NTBParams struct {
	// Formats is bmNtbFormatsSupported (bit 0: NTB16, bit 1: NTB32).
	Formats uint16
	// InMaxSize is dwNtbInMaxSize: the largest NTB the device sends.
	InMaxSize int
	// InDivisor, InRemainder and InAlign describe the device's IN
	// datagram and NDP alignment (informative: the parser does not rely
	// on them).
	InDivisor, InRemainder, InAlign int
	// OutMaxSize is dwNtbOutMaxSize: the largest NTB the device takes.
	OutMaxSize int
	// OutDivisor and OutRemainder place OUT datagrams: each starts at an
	// offset o with o % OutDivisor == OutRemainder.
	OutDivisor, OutRemainder int
	// OutAlign is wNdpOutAlignment: where the NDP of an OUT NTB may start.
	OutAlign int
	// OutMaxDatagrams is wNtbOutMaxDatagrams: the most datagrams per OUT
	// NTB, 0 for no limit.
	OutMaxDatagrams int
}

// ParseNTBParams decodes the NTB parameter structure and checks that it
// describes NTB16 blocks the driver can build.
func ParseNTBParams(b []byte) (NTBParams, error) {
	var p NTBParams
	if len(b) < 28 || int(binary.LittleEndian.Uint16(b)) < 28 {
		return p, fmt.Errorf("NTB parameters of %d bytes (wLength %d): want 28: %w", len(b), u16at(b, 0), ErrBadDescriptor)
	}
	p.Formats = binary.LittleEndian.Uint16(b[2:])
	p.InMaxSize = int(binary.LittleEndian.Uint32(b[4:]))
	p.InDivisor = int(binary.LittleEndian.Uint16(b[8:]))
	p.InRemainder = int(binary.LittleEndian.Uint16(b[10:]))
	p.InAlign = int(binary.LittleEndian.Uint16(b[12:]))
	p.OutMaxSize = int(binary.LittleEndian.Uint32(b[16:]))
	p.OutDivisor = int(binary.LittleEndian.Uint16(b[20:]))
	p.OutRemainder = int(binary.LittleEndian.Uint16(b[22:]))
	p.OutAlign = int(binary.LittleEndian.Uint16(b[24:]))
	p.OutMaxDatagrams = int(binary.LittleEndian.Uint16(b[26:]))
	switch {
	case p.Formats&1 == 0:
		return p, fmt.Errorf("NTB parameters: bmNtbFormatsSupported %#x lacks NTB16: %w", p.Formats, ErrBadDescriptor)
	case p.InMaxSize < nth16Len+ndp16MinLen+14:
		return p, fmt.Errorf("NTB parameters: dwNtbInMaxSize %d cannot hold one frame: %w", p.InMaxSize, ErrBadDescriptor)
	case p.OutMaxSize < nth16Len+ndp16MinLen+14:
		return p, fmt.Errorf("NTB parameters: dwNtbOutMaxSize %d cannot hold one frame: %w", p.OutMaxSize, ErrBadDescriptor)
	case p.OutDivisor != 0 && (p.OutDivisor&(p.OutDivisor-1) != 0 || p.OutDivisor > 1024 || p.OutRemainder >= p.OutDivisor):
		return p, fmt.Errorf("NTB parameters: wNdpOutDivisor %d, wNdpOutPayloadRemainder %d: want a power of two up to 1024 and a smaller remainder: %w", p.OutDivisor, p.OutRemainder, ErrBadDescriptor)
	case p.OutAlign != 0 && (p.OutAlign&(p.OutAlign-1) != 0 || p.OutAlign > 1024):
		return p, fmt.Errorf("NTB parameters: wNdpOutAlignment %d: want a power of two up to 1024: %w", p.OutAlign, ErrBadDescriptor)
	}
	return p, nil
}

func u16at(b []byte, off int) int {
	if off+2 > len(b) {
		return -1
	}
	return int(binary.LittleEndian.Uint16(b[off:]))
}

// NTBWriter builds one NTB16 after another into a caller's buffer: Reset,
// Add frames while they fit, then Finish. The layout is NTH16, the
// datagrams (each placed at an offset that satisfies the device's divisor
// and remainder), then one NDP16 aligned to the device's NDP alignment. It
// never allocates.
type NTBWriter struct {
	buf       []byte
	max       int
	div, rem  int
	ndpAlign  int
	maxFrames int
	seq       uint16

	end     int      // end of the last datagram
	entries [][2]int // (offset, length) of the datagrams, reused
}

// NewNTBWriter makes a writer for NTBs of at most maxSize bytes (and at
// most maxFrames datagrams, 0 for no limit), placing datagrams at offsets o
// with o % div == rem (div 0 or 1: anywhere 4-aligned) and the NDP on a
// multiple of ndpAlign (at least 4).
func NewNTBWriter(maxSize, maxFrames, div, rem, ndpAlign int) *NTBWriter {
	if div < 4 {
		div, rem = 4, 0
	}
	if ndpAlign < 4 {
		ndpAlign = 4
	}
	most := maxFrames
	if most == 0 || most > 1024 {
		most = 1024
	}
	return &NTBWriter{max: maxSize, div: div, rem: rem, ndpAlign: ndpAlign, maxFrames: most, entries: make([][2]int, 0, most)}
}

// Reset starts a new NTB in buf (of at least the writer's maxSize bytes).
func (w *NTBWriter) Reset(buf []byte) {
	w.buf = buf[:min(len(buf), w.max)]
	w.end = nth16Len
	w.entries = w.entries[:0]
}

// Len is the number of datagrams added since Reset.
func (w *NTBWriter) Len() int { return len(w.entries) }

// place is the offset of the next datagram.
func (w *NTBWriter) place() int {
	o := w.end
	if r := o % w.div; r != w.rem {
		o += (w.rem - r + w.div) % w.div
	}
	return o
}

// ndpSize is the size of an NDP16 with n entries and its terminator: at
// least 16 bytes, so a table without datagrams gets a second zero entry.
func ndpSize(n int) int { return ndp16Header + 4*max(n+1, 2) }

func alignUp(v, a int) int { return (v + a - 1) / a * a }

// Fits reports whether a frame of n bytes (or, with parts, several pieces
// of n bytes in all) still fits.
func (w *NTBWriter) Fits(n int) bool {
	if len(w.entries) >= w.maxFrames {
		return false
	}
	end := w.place() + n
	return alignUp(end, w.ndpAlign)+ndpSize(len(w.entries)+1) <= len(w.buf) && end <= 0xFFFF
}

// Add appends a datagram made of the given pieces (a frame's header and an
// attached payload, or the whole frame). It reports false, adding nothing,
// when the datagram does not fit.
func (w *NTBWriter) Add(pieces ...[]byte) bool {
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	if !w.Fits(n) {
		return false
	}
	o := w.place()
	clear(w.buf[w.end:o])
	at := o
	for _, p := range pieces {
		at += copy(w.buf[at:], p)
	}
	w.entries = append(w.entries, [2]int{o, n})
	w.end = at
	return true
}

// Finish writes the NTH16 and the NDP16 and returns the NTB. maxPacket,
// when positive, is the bulk OUT endpoint's packet size: an NTB that would
// end exactly on a packet boundary gets one byte more, so that its last
// packet is short and ends the transfer without a zero-length packet.
func (w *NTBWriter) Finish(maxPacket int) []byte {
	ndp := alignUp(w.end, w.ndpAlign)
	clear(w.buf[w.end:ndp])
	n := len(w.entries)
	b := w.buf
	binary.LittleEndian.PutUint32(b[ndp:], ndp16Sig)
	binary.LittleEndian.PutUint16(b[ndp+4:], uint16(ndpSize(n)))
	binary.LittleEndian.PutUint16(b[ndp+6:], 0)
	at := ndp + ndp16Header
	for _, e := range w.entries {
		binary.LittleEndian.PutUint16(b[at:], uint16(e[0]))
		binary.LittleEndian.PutUint16(b[at+2:], uint16(e[1]))
		at += 4
	}
	for ; at < ndp+ndpSize(n); at += 4 {
		binary.LittleEndian.PutUint32(b[at:], 0)
	}
	if maxPacket > 0 && at%maxPacket == 0 && at < len(b) {
		b[at] = 0
		at++
	}
	binary.LittleEndian.PutUint32(b[0:], nth16Sig)
	binary.LittleEndian.PutUint16(b[4:], nth16Len)
	binary.LittleEndian.PutUint16(b[6:], w.seq)
	binary.LittleEndian.PutUint16(b[8:], uint16(at))
	binary.LittleEndian.PutUint16(b[10:], uint16(ndp))
	w.seq++
	return b[:at]
}

// ParseNTB16 splits a received NTB16 into its datagrams, appending each (a
// slice of b, not a copy) to out. It follows the chain of NDP16s. It
// rejects, with ErrBadNTB, every inconsistency: a wrong signature or
// header length, a block length past the transfer, an NDP index that is
// unaligned, overlaps the header or runs past the block, an NDP length
// below 16 or not a multiple of 4, a table without its (0, 0) terminator,
// a datagram outside the block or overlapping the header, a datagram
// shorter than an Ethernet header, more NDP16s (16 bytes each) or
// datagrams (14 bytes each) than the block holds side by side, which
// catches a chain that loops. A wBlockLength
// of 0 means the block is the whole transfer (NCM 1.0 allows it for a
// block ended by a short packet). An NDP16 that says its datagrams carry a
// CRC ("NCM1") is refused: the driver never asks for CRCs. On error out
// comes back as it was given: a block that lies is dropped whole.
func ParseNTB16(b []byte, out [][]byte) ([][]byte, error) {
	start := len(out)
	out, err := parseNTB16(b, out)
	if err != nil {
		return out[:start], err
	}
	return out, nil
}

func parseNTB16(b []byte, out [][]byte) ([][]byte, error) {
	if len(b) < nth16Len {
		return out, fmt.Errorf("NTB of %d bytes, shorter than its 12-byte header: %w", len(b), ErrBadNTB)
	}
	if s := binary.LittleEndian.Uint32(b); s != nth16Sig {
		return out, fmt.Errorf("NTH16 signature %#08x, want %#08x (NCMH): %w", s, uint32(nth16Sig), ErrBadNTB)
	}
	if h := binary.LittleEndian.Uint16(b[4:]); h != nth16Len {
		return out, fmt.Errorf("NTH16 wHeaderLength %d, want 12: %w", h, ErrBadNTB)
	}
	block := int(binary.LittleEndian.Uint16(b[8:]))
	if block == 0 {
		block = len(b)
	}
	if block < nth16Len || block > len(b) {
		return out, fmt.Errorf("NTH16 wBlockLength %d with %d bytes received: %w", block, len(b), ErrBadNTB)
	}
	b = b[:block]
	ndp := int(binary.LittleEndian.Uint16(b[10:]))
	start := len(out)
	for tables := 1; ; tables++ {
		// Each NDP takes at least 16 bytes of the block, and each
		// datagram 14: more of either than fit side by side means tables
		// or datagrams overlap, or the chain loops.
		if tables > block/ndp16MinLen {
			return out, fmt.Errorf("NDP16 chain of more tables than a block of %d bytes holds (it overlaps or loops): %w", block, ErrBadNTB)
		}
		if ndp < nth16Len || ndp%4 != 0 || ndp+ndp16MinLen > block {
			return out, fmt.Errorf("NDP16 index %d in a block of %d bytes: want a multiple of 4 after the header with 16 bytes of table: %w", ndp, block, ErrBadNTB)
		}
		if s := binary.LittleEndian.Uint32(b[ndp:]); s != ndp16Sig {
			return out, fmt.Errorf("NDP16 at %d: signature %#08x, want %#08x (NCM0): %w", ndp, s, uint32(ndp16Sig), ErrBadNTB)
		}
		l := int(binary.LittleEndian.Uint16(b[ndp+4:]))
		if l < ndp16MinLen || l%4 != 0 || ndp+l > block {
			return out, fmt.Errorf("NDP16 at %d: wLength %d in a block of %d bytes: want a multiple of 4 from 16 that fits: %w", ndp, l, block, ErrBadNTB)
		}
		terminated := false
		for e := ndp + ndp16Header; e+4 <= ndp+l; e += 4 {
			idx := int(binary.LittleEndian.Uint16(b[e:]))
			n := int(binary.LittleEndian.Uint16(b[e+2:]))
			if idx == 0 || n == 0 {
				if idx != n {
					return out, fmt.Errorf("NDP16 at %d: entry (%d, %d) has one zero field: %w", ndp, idx, n, ErrBadNTB)
				}
				terminated = true
				break
			}
			if idx < nth16Len || idx+n > block {
				return out, fmt.Errorf("NDP16 at %d: datagram at %d of %d bytes outside the block of %d bytes: %w", ndp, idx, n, block, ErrBadNTB)
			}
			if n < 14 {
				return out, fmt.Errorf("NDP16 at %d: datagram at %d of %d bytes, shorter than an Ethernet header: %w", ndp, idx, n, ErrBadNTB)
			}
			if len(out)-start >= block/14 {
				return out, fmt.Errorf("more datagrams than a block of %d bytes holds (they overlap): %w", block, ErrBadNTB)
			}
			out = append(out, b[idx:idx+n])
		}
		if !terminated {
			return out, fmt.Errorf("NDP16 at %d: no (0, 0) entry ends its %d bytes: %w", ndp, l, ErrBadNTB)
		}
		ndp = int(binary.LittleEndian.Uint16(b[ndp+6:]))
		if ndp == 0 {
			return out, nil
		}
	}
}
