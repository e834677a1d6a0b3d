package nic_test

import (
	"testing"

	"github.com/gomx-dev/gomx/emulated/nicpair"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

// modelPair is two transports over the e1000e driver on two cabled
// emulated 82574Ls.
func modelPair(t *testing.T, o e1000e.Options) (a, b transport.Transport) {
	return modelPairWith(t, emulated.DefaultE1000EOptions(), o)
}

// modelPairWith is modelPair on a model built with mo.
func modelPairWith(t *testing.T, mo emulated.E1000EOptions, o e1000e.Options) (a, b transport.Transport) {
	ts := nicpair.Transports(t, nicpair.E1000EWith(t, mo, o), nicpair.Raw)
	return ts[0], ts[1]
}

func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		o    func(*e1000e.Options)
	}{
		{"polling", func(*e1000e.Options) {}},
		{"interrupts", func(o *e1000e.Options) { o.Interrupts = true }},
		{"two-queues", func(o *e1000e.Options) { o.Queues = 2 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			transporttest.RunWith(t, func(t *testing.T) (a, b transport.Transport) {
				o := e1000e.DefaultOptions()
				c.o(&o)
				return modelPair(t, o)
			}, transporttest.Options{MinData: 60 - 14, InPlace: true})
		})
	}
}
