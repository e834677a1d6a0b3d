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
	defer p.Close()
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
	var out [4]Completion
	for i := 0; i < 1e7; i++ {
		if n := c.Poll(out[:]); n > 0 {
			t.Logf("%+v", out[:n])
			break
		}
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("mismatch")
	}
	t.Logf("%+v %+v", c.Stats(), p.Stats(0))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	dom.Unmap(sm)
	dom.Unmap(dm)
}
