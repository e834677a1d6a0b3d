package ioat

import (
	"bytes"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
)

func TestSmoke(t *testing.T) {
	p, err := emulated.NewCBDMA(emulated.CBDMAOptions{Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(p.Devices()[0], Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 3<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dst := make([]byte, len(src))
	dom := p.IOMMU()
	sm, _ := dom.Map(src)
	dm, _ := dom.Map(dst)
	if err := c.EnqueueCopy(dm, 0, sm, 0, len(src), 42); err != nil {
		t.Fatal(err)
	}
	c.Submit()
	r := drain(t, c, 1)
	if r[0].Tag != 42 || r[0].Err != nil {
		t.Fatalf("completion %+v, want tag 42 and no error", r[0])
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("mismatch")
	}
	t.Logf("%+v %+v", c.Stats(), p.Stats(0))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dom.Unmap(sm); err != nil {
		t.Fatal(err)
	}
	if err := dom.Unmap(dm); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
