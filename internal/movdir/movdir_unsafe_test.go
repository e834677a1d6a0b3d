package movdir

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// aligned returns a 64-byte aligned window of n records in a fresh buffer.
func aligned(n int) []byte {
	b := make([]byte, 64*n+64)
	off := int((64 - uintptr(unsafe.Pointer(&b[0]))&63) & 63)
	return b[off : off+64*n]
}

func records(t *testing.T) {
	t.Helper()
	dst := aligned(4)
	for i := 0; i < 4; i++ {
		var rec [64]byte
		for j := range rec {
			rec[j] = byte(i*64 + j + 1)
		}
		Store(unsafe.Pointer(&dst[i*64]), &rec)
		if string(dst[i*64:i*64+64]) != string(rec[:]) {
			t.Fatalf("record %d: wrote % x, want % x", i, dst[i*64:i*64+64], rec)
		}
	}
	for i := range dst {
		if dst[i] != byte(i+1) {
			t.Fatalf("byte %d is %d: a record spilled into its neighbour", i, dst[i])
		}
	}
}

// TestMOVDIR64B writes 64-byte records to ordinary memory with the
// instruction itself.
func TestMOVDIR64B(t *testing.T) {
	if !Supported() {
		t.Skip("this CPU lacks MOVDIR64B (CPUID.7.0:ECX bit 28; Tremont, Tiger Lake, Sapphire Rapids and later have it): only the fallback runs here")
	}
	records(t)
}

// TestFallback runs the eight-store path on every CPU.
func TestFallback(t *testing.T) {
	dst := aligned(1)
	var rec [64]byte
	for j := range rec {
		rec[j] = byte(0xC0 + j)
	}
	storeWords(unsafe.Pointer(&dst[0]), &rec)
	if string(dst) != string(rec[:]) {
		t.Fatalf("fallback wrote % x", dst)
	}
	records(t)
}

func TestMisaligned(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("misaligned Store did not panic")
		}
	}()
	dst := aligned(2)
	var rec [64]byte
	Store(unsafe.Pointer(&dst[8]), &rec)
}

// TestENQCMDAbsent checks that a CPU without ENQCMD is refused with a
// panic naming the way out, instead of running something else.
func TestENQCMDAbsent(t *testing.T) {
	if EnqueueSupported() {
		t.Skip("this CPU has ENQCMD; ENQCMD needs a shared WQ portal to answer, ordinary memory cannot (the ioat kernel-path tests drive the model's shared WQ)")
	}
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "dedicated WQ") {
			t.Fatalf("Enqueue without ENQCMD: recovered %v, want a panic naming dedicated WQs", r)
		}
	}()
	dst := aligned(1)
	var rec [64]byte
	Enqueue(unsafe.Pointer(&dst[0]), &rec)
}
