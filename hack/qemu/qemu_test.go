//go:build qemu

package qemu

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestQEMU boots every configuration (or those in GOMX_QEMU_CONFIG) and
// fails with the guest's problems, exactly as `make qemu-test` does. It
// only builds with -tags qemu, because it needs root, apt and minutes:
//
//	go test -tags qemu -v -timeout 20m ./hack/qemu/
//	GOMX_QEMU_CONFIG=iommu GOMX_QEMU_KEEP=1 go test -tags qemu -v ./hack/qemu/
func TestQEMU(t *testing.T) {
	names := os.Getenv("GOMX_QEMU_CONFIG")
	configs, err := Lookup(names)
	if err != nil {
		t.Fatal(err)
	}
	results, err := Run(context.Background(), Options{
		BuildDir: os.Getenv("GOMX_QEMU_DIR"),
		Configs:  configs,
		Keep:     os.Getenv("GOMX_QEMU_KEEP") == "1",
		Stream:   testing.Verbose(),
		Out:      testWriter{t},
	})
	for _, r := range results {
		t.Run(r.Config.Name, func(t *testing.T) {
			for _, tr := range r.Summary.Tests {
				t.Log(tr.Line())
			}
			for _, p := range r.Problems {
				t.Error(p)
			}
			if len(r.Problems) > 0 {
				t.Logf("serial log: %s", r.Log)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// testWriter sends the runner's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
