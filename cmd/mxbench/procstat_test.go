package main

import "testing"

// TestProcStat: this process's start lies in the past and its peak
// resident memory is at least what the test allocated and touched.
func TestProcStat(t *testing.T) {
	d, ok := sinceProcessStart()
	if !ok || d < 0 {
		t.Fatalf("sinceProcessStart() = %v, %v", d, ok)
	}
	b := make([]byte, 32<<20)
	for i := range b {
		if i%4096 == 0 {
			b[i] = 1
		}
	}
	if got := peakRSS(); got < int64(len(b)) {
		t.Errorf("peakRSS() = %d after touching %d bytes", got, len(b))
	}
	_ = b[len(b)-1]
}
