package nic_test

import (
	"testing"

	"github.com/gomx-dev/gomx/internal/nicpair"

	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

// ixgbePair is two transports over the ixgbe driver on two cabled emulated
// 82599s.
func ixgbePair(t *testing.T, o ixgbe.Options) (a, b transport.Transport) {
	ts := nicpair.Transports(t, nicpair.IXGBE(t, o), nicpair.Raw)
	return ts[0], ts[1]
}

// The transport conformance suite over the 82599 driver and model: the nic
// transport is the same whatever driver is under it.
func TestConformance82599(t *testing.T) {
	for _, c := range []struct {
		name string
		o    func(*ixgbe.Options)
	}{
		{"polling", func(*ixgbe.Options) {}},
		{"interrupts", func(o *ixgbe.Options) { o.Interrupts = true }},
		{"four-queues", func(o *ixgbe.Options) { o.Queues = 4; o.RxRing, o.TxRing = 128, 128 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.RunWith(t, func(t *testing.T) (a, b transport.Transport) {
				o := ixgbe.DefaultOptions()
				c.o(&o)
				return ixgbePair(t, o)
			}, transporttest.Options{MinData: 60 - 14, InPlace: true})
		})
	}
}
