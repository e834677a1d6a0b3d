package idxd

import (
	"errors"
	"math/big"
	"regexp"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/internal/sysfstest"
)

func TestScan(t *testing.T) {
	root := sysfstest.Build(t, "../testdata/idxd-user.txt")
	devs, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 {
		t.Fatalf("%d devices, want 1", len(devs))
	}
	d := devs[0]
	if d.Name != "dsa0" || d.PCI != "0000:6a:01.0" || d.State != "enabled" || !d.PASIDEnabled || !d.Configurable ||
		d.MaxWQs != 8 || d.MaxEngines != 4 || d.MaxGroups != 4 || d.MaxWQSize != 128 || d.MaxTransferSize != 1<<31 || d.MaxBatchSize != 1024 {
		t.Errorf("device %+v", d)
	}
	if d.OpCap != [4]uint64{0x1003f} || !d.HasOp(3) || d.HasOp(0x20) {
		t.Errorf("op_cap %#x", d.OpCap)
	}
	if len(d.WQs) != 4 || len(d.Engines) != 4 || len(d.Groups) != 4 {
		t.Fatalf("%d WQs, %d engines, %d groups", len(d.WQs), len(d.Engines), len(d.Groups))
	}
	w := d.WQs[1]
	if w.Name != "wq0.1" || w.Dedicated() || w.Mode != "shared" || w.Type != "user" || w.Size != 16 || w.Group != 1 ||
		w.Priority != 10 || w.Threshold != 16 || w.MaxTransferSize != 2<<20 || w.MaxBatchSize != 32 || w.WQName != "app1" || w.DriverName != "user" {
		t.Errorf("wq0.1 %+v", w)
	}
	if got := w.CharDev("/dev"); got != "/dev/dsa/wq0.1" {
		t.Errorf("CharDev = %s", got)
	}
	if u := UserWQs(devs); len(u) != 3 {
		t.Errorf("%d user WQs, want 3 (wq0.0, wq0.1, wq0.3)", len(u))
	}
	if _, w, ok := Find(devs, "dsa0/wq0.3"); !ok || w.State != "disabled" {
		t.Errorf("Find dsa0/wq0.3: %v %+v", ok, w)
	}
	if _, err := Scan(t.TempDir()); !errors.Is(err, ErrNoIDXD) {
		t.Errorf("Scan of a tree without the dsa bus: %v", err)
	}
}

func TestParseOpCap(t *testing.T) {
	cases := []struct {
		in   string
		want [4]uint64
		bad  bool
	}{
		{"0003007f", [4]uint64{0x3007f}, false},
		{"00000000,00000000,00000000,00000000,00000000,00000000,00000001,0003007f", [4]uint64{0x1_0003007f}, false},
		{"80000000,00000000,00000000,00000000,00000000,00000000,00000000,00000000", [4]uint64{0, 0, 0, 1 << 63}, false},
		{"1,0", [4]uint64{1 << 32}, false},
		{"", [4]uint64{}, true},
		{"123456789", [4]uint64{}, true},
		{"0,0,0,0,0,0,0,0,0", [4]uint64{}, true},
		{"g", [4]uint64{}, true},
		{"1,,2", [4]uint64{}, true},
	}
	for _, c := range cases {
		got, err := ParseOpCap(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseOpCap(%q) = %#x, %v", c.in, got, err)
		}
	}
}

var opCapForm = regexp.MustCompile(`^[0-9a-fA-F]{1,8}(,[0-9a-fA-F]{1,8}){0,7}$`)

// FuzzParseOpCap checks the op_cap decoder against an oracle that reads
// the bitmap as one big hexadecimal number, each word padded to 32 bits.
func FuzzParseOpCap(f *testing.F) {
	f.Add("0003007f")
	f.Add("00000000,00000000,00000000,00000000,00000000,00000000,00000000,0001003f")
	f.Add("ffffffff,0")
	f.Add(" 1 ")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseOpCap(s)
		trimmed := strings.TrimSpace(s)
		valid := opCapForm.MatchString(trimmed)
		if valid != (err == nil) {
			t.Fatalf("ParseOpCap(%q): err %v, oracle says valid=%v", s, err, valid)
		}
		if !valid {
			return
		}
		var hex strings.Builder
		for _, w := range strings.Split(trimmed, ",") {
			hex.WriteString(strings.Repeat("0", 8-len(w)) + w)
		}
		want, _ := new(big.Int).SetString(hex.String(), 16)
		for bit := 0; bit < 256; bit++ {
			if g := uint(got[bit/64] >> (bit % 64) & 1); g != want.Bit(bit) {
				t.Fatalf("ParseOpCap(%q): bit %d is %d, oracle %d", s, bit, g, want.Bit(bit))
			}
		}
	})
}
