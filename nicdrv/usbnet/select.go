package usbnet

import (
	"fmt"
	"strconv"
	"strings"
)

// Selector names one USB device the way lsusb does: by bus and device
// address ("3:7", lsusb -s) or by vendor and product ID ("0525:a4a1", lsusb
// -d, four hex digits each; the first such device).
type Selector struct {
	// Bus and Address, when Bus > 0.
	Bus, Address int
	// Vendor and Product, when Bus is 0.
	Vendor, Product uint16
}

// ParseSelector reads "BUS:ADDR" (decimal) or "VID:PID" (four hex digits
// each).
func ParseSelector(s string) (Selector, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return Selector{}, fmt.Errorf("usbnet: USB device %q: want BUS:ADDR (lsusb -s, e.g. 3:7) or VID:PID (lsusb -d, e.g. 0525:a4a1)", s)
	}
	if len(a) == 4 && len(b) == 4 {
		v, err1 := strconv.ParseUint(a, 16, 16)
		p, err2 := strconv.ParseUint(b, 16, 16)
		if err1 == nil && err2 == nil {
			return Selector{Vendor: uint16(v), Product: uint16(p)}, nil
		}
	}
	bus, err1 := strconv.Atoi(a)
	addr, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || bus < 1 || bus > 255 || addr < 1 || addr > 127 {
		return Selector{}, fmt.Errorf("usbnet: USB device %q: want BUS:ADDR in decimal (bus 1..255, address 1..127, as lsusb -s) or VID:PID as four hex digits each (lsusb -d)", s)
	}
	return Selector{Bus: bus, Address: addr}, nil
}

// Matches tells whether a device at bus:addr with the given IDs is the one
// named.
func (s Selector) Matches(bus, addr int, vendor, product uint16) bool {
	if s.Bus > 0 {
		return s.Bus == bus && s.Address == addr
	}
	return s.Vendor == vendor && s.Product == product
}

// String formats the selector as it is parsed.
func (s Selector) String() string {
	if s.Bus > 0 {
		return fmt.Sprintf("%d:%d", s.Bus, s.Address)
	}
	return fmt.Sprintf("%04x:%04x", s.Vendor, s.Product)
}
