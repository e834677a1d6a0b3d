package netns

import (
	"os"
	"testing"
)

// Close deletes both namespaces, and a second Close is harmless.
func TestPairClose(t *testing.T) {
	if why := Missing(); why != "" {
		if os.Getenv("GOMX_REQUIRE_XDP") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	p, err := NewPair(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{p.NSA, p.NSB} {
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			t.Fatalf("namespace %s missing after NewPair: %v", ns, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{p.NSA, p.NSB} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s left behind by Close", ns)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
