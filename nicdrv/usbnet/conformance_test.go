package usbnet_test

import (
	"errors"
	"testing"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/nicdrv/usbnet"
	"github.com/gomx-dev/gomx/nicdrv/usbnet/usbfake"
)

// pair makes two fake devices of model m cabled to each other.
func pair(m usbnet.Model) [2]*usbfake.Device {
	a := usbfake.New(usbfake.Options{Model: m, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0, 0x0A}, Address: 2})
	b := usbfake.New(usbfake.Options{Model: m, MAC: nicdrv.MAC{0x02, 0, 0, 0, 0, 0x0B}, Address: 3})
	usbfake.Cable(a, b)
	return [2]*usbfake.Device{a, b}
}

// openPair opens the driver with o on both devices of a pair; closing the
// NICs is the test's (a test may close one early, or unplug it).
func openPair(t *testing.T, devs [2]*usbfake.Device, o usbnet.Options) [2]*usbnet.NIC {
	t.Helper()
	var nics [2]*usbnet.NIC
	for i := range nics {
		n, err := usbnet.Open(devs[i], o)
		if err != nil {
			if i > 0 {
				nics[0].Close()
			}
			t.Fatal(err)
		}
		nics[i] = n
	}
	return nics
}

// fakeRig opens the driver on two cabled fake devices of model m.
func fakeRig(m usbnet.Model) nictest.NewRig {
	return func(t *testing.T, c nictest.Config) *nictest.Rig {
		devs := pair(m)
		opts := usbnet.DefaultOptions()
		opts.HeaderSplit = c.HeaderSplit
		if c.HeaderSplit {
			if _, err := usbnet.Open(devs[0], opts); !errors.Is(err, nicdrv.ErrNotSupported) {
				t.Fatalf("Open with header split: %v, want ErrNotSupported", err)
			}
			t.Skip("a USB function delivers whole frames: header split is refused at Open")
		}
		t.Cleanup(func() {
			for _, d := range devs {
				if err := d.Check(); err != nil {
					t.Error(err)
				}
				if !d.KernelBound() {
					t.Errorf("%v: interfaces not given back to the kernel after Close", d)
				}
			}
		})
		open := func(i int) (nicdrv.NIC, error) {
			n, err := usbnet.Open(devs[i], opts)
			if err != nil {
				return nil, err
			}
			return n, nil
		}
		r := &nictest.Rig{
			SetLink: func(up bool) error { devs[0].SetLink(up); return nil },
			Check: func() error {
				return errors.Join(devs[0].Check(), devs[1].Check())
			},
		}
		if err := r.Open(open); err != nil {
			t.Fatal(err)
		}
		return r
	}
}

func TestConformanceECM(t *testing.T) { nictest.Run(t, fakeRig(usbnet.ECM)) }

func TestConformanceNCM(t *testing.T) { nictest.Run(t, fakeRig(usbnet.NCM)) }
