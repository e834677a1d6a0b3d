package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// oracle is hash/crc32's CRC-32C, which Checksum must equal.
var oracle = crc32.MakeTable(crc32.Castagnoli)

// TestChecksumMatchesHashCRC32 compares Checksum with hash/crc32 for every
// length up to past longCut, at every alignment of the start, on random
// bytes, with the fast path on and off.
func TestChecksumMatchesHashCRC32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, longCut+64+8)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for off := range 8 {
		for n := 0; off+n <= len(buf); n++ {
			p := buf[off : off+n]
			if got, want := Checksum(p), crc32.Checksum(p, oracle); got != want {
				t.Fatalf("Checksum of %d bytes at offset %d = %#08x, want %#08x", n, off, got, want)
			}
			if got, want := update(0, p), crc32.Checksum(p, oracle); got != want {
				t.Fatalf("update of %d bytes at offset %d = %#08x, want %#08x", n, off, got, want)
			}
		}
	}
}

// TestChecksumKnownValue checks the standard check value of CRC-32C
// (RFC 3720, B.4: "123456789").
func TestChecksumKnownValue(t *testing.T) {
	if got := Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("Checksum(\"123456789\") = %#08x, want 0xe3069283", got)
	}
}

// FuzzChecksum compares Checksum and a continued update with hash/crc32 on
// any bytes.
func FuzzChecksum(f *testing.F) {
	f.Add([]byte{}, 0)
	f.Add([]byte("123456789"), 4)
	f.Add(make([]byte, 45), 13)
	f.Fuzz(func(t *testing.T, p []byte, cut int) {
		if got, want := Checksum(p), crc32.Checksum(p, oracle); got != want {
			t.Fatalf("Checksum(%x) = %#08x, want %#08x", p, got, want)
		}
		if len(p) == 0 {
			return
		}
		cut = int(uint(cut) % uint(len(p)))
		if got, want := update(update(0, p[:cut]), p[cut:]), crc32.Checksum(p, oracle); got != want {
			t.Fatalf("update in two parts at %d of %x = %#08x, want %#08x", cut, p, got, want)
		}
	})
}

// BenchmarkChecksum is a small message's frame (48 bytes) through
// Checksum and through hash/crc32.
func BenchmarkChecksum(b *testing.B) {
	p := make([]byte, 48)
	b.Run("crc32c", func(b *testing.B) {
		for b.Loop() {
			Checksum(p)
		}
	})
	b.Run("hash-crc32", func(b *testing.B) {
		for b.Loop() {
			crc32.Checksum(p, oracle)
		}
	})
}
