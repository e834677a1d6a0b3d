package usbnet_test

import (
	"testing"

	"github.com/gomx-dev/gomx/nicdrv/usbnet"
)

func TestParseSelector(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want usbnet.Selector
		ok   bool
	}{
		{"3:7", usbnet.Selector{Bus: 3, Address: 7}, true},
		{"003:007", usbnet.Selector{Bus: 3, Address: 7}, true},
		{"0525:a4a1", usbnet.Selector{Vendor: 0x0525, Product: 0xa4a1}, true},
		{"0525:A4A2", usbnet.Selector{Vendor: 0x0525, Product: 0xa4a2}, true},
		{"3", usbnet.Selector{}, false},
		{"0:1", usbnet.Selector{}, false},
		{"3:200", usbnet.Selector{}, false},
		{"x525:a4a1", usbnet.Selector{}, false},
	} {
		got, err := usbnet.ParseSelector(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSelector(%q) = %+v, %v", tc.in, got, err)
		}
		if err == nil {
			if back, _ := usbnet.ParseSelector(got.String()); back != got {
				t.Errorf("%q formats as %q, which parses to %+v", tc.in, got.String(), back)
			}
		}
	}
}
