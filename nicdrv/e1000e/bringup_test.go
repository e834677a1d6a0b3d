package e1000e_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/pci"
)

var update = flag.Bool("update", false, "rewrite testdata/bringup.golden from this run")

// recorder is a pci.Device whose BAR0 and config writes are logged, in
// order, as register names and values: the driver's bring-up as the NIC
// sees it.
type recorder struct {
	pci.Device
	mu  sync.Mutex
	log []string
}

type recRegs struct {
	pci.Registers
	r *recorder
}

var regNames = map[int]string{
	hw.CTRL: "CTRL", hw.STATUS: "STATUS", hw.EECD: "EECD", hw.EERD: "EERD", hw.CTRLEXT: "CTRL_EXT", hw.MDIC: "MDIC",
	hw.ICR: "ICR", hw.ITR: "ITR", hw.ICS: "ICS", hw.IMS: "IMS", hw.IMC: "IMC", hw.EIAC: "EIAC", hw.IAM: "IAM", hw.IVAR: "IVAR",
	hw.RCTL: "RCTL", hw.TCTL: "TCTL", hw.TIPG: "TIPG", hw.EXTCNFCTRL: "EXTCNF_CTRL", hw.PSRCTL: "PSRCTL",
	hw.RDTR: "RDTR", hw.RADV: "RADV", hw.TIDV: "TIDV", hw.TADV: "TADV", hw.RXCSUM: "RXCSUM", hw.RFCTL: "RFCTL",
	hw.MRQC: "MRQC", hw.GCR: "GCR", hw.GCR2: "GCR2",
}

func init() {
	for q := 0; q < 2; q++ {
		for off, name := range map[int]string{hw.RDBAL: "RDBAL", hw.RDBAH: "RDBAH", hw.RDLEN: "RDLEN", hw.RDH: "RDH", hw.RDT: "RDT",
			hw.RXDCTL: "RXDCTL", hw.TDBAL: "TDBAL", hw.TDBAH: "TDBAH", hw.TDLEN: "TDLEN", hw.TDH: "TDH", hw.TDT: "TDT",
			hw.TXDCTL: "TXDCTL", hw.TARC: "TARC"} {
			regNames[hw.Q(off, q)] = fmt.Sprintf("%s%d", name, q)
		}
	}
	for v := 0; v < hw.MSIXVectors; v++ {
		regNames[hw.EITR(v)] = fmt.Sprintf("EITR%d", v)
	}
}

func regName(off int) string {
	switch {
	case regNames[off] != "":
		return regNames[off]
	case off >= hw.MTA && off < hw.MTA+4*hw.MTAEntries:
		return "MTA[]"
	case off >= hw.VFTA && off < hw.VFTA+4*128:
		return "VFTA[]"
	case off >= hw.RETA && off < hw.RETA+128:
		return "RETA[]"
	case off >= hw.RSSRK && off < hw.RSSRK+40:
		return "RSSRK[]"
	case off >= hw.RAL0 && off < hw.RAL0+8*hw.RAREntries:
		i := (off - hw.RAL0) / 8
		if off%8 == 0 {
			return fmt.Sprintf("RAL%d", i)
		}
		return fmt.Sprintf("RAH%d", i)
	}
	return fmt.Sprintf("%#x", off)
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Runs of one table are one line: the golden file stays readable.
	if n := len(r.log); n > 0 && strings.HasSuffix(s, "[]") && r.log[n-1] == s {
		return
	}
	r.log = append(r.log, s)
}

func (r *recorder) BAR(i int) (pci.Registers, error) {
	regs, err := r.Device.BAR(i)
	if err != nil {
		return nil, err
	}
	return &recRegs{Registers: regs, r: r}, nil
}

func (r *recorder) WriteConfig(off int, b []byte) error {
	if off == pci.ConfigCommand && len(b) == 2 {
		r.add(fmt.Sprintf("config COMMAND = %#04x", binary.LittleEndian.Uint16(b)))
	}
	return r.Device.WriteConfig(off, b)
}

func (g *recRegs) Write32(off int, v uint32) {
	name := regName(off)
	switch {
	case strings.HasSuffix(name, "[]"):
		g.r.add("write " + name)
	case strings.HasPrefix(name, "RDBA") || strings.HasPrefix(name, "TDBA"):
		g.r.add(fmt.Sprintf("write %s = <ring IOVA>", name)) // IOVAs are the IOMMU's choice
	default:
		g.r.add(fmt.Sprintf("write %s = %#08x", name, v))
	}
	g.Registers.Write32(off, v)
}

// TestBringUpSequence records every register and COMMAND write of Open and
// Close on the model and compares them with testdata/bringup.golden (run
// with -update after a deliberate change, and review the diff). It also
// checks, independently of the golden file, the orderings QEMU 7.2 and the
// 82574 need.
func TestBringUpSequence(t *testing.T) {
	p := newModel(t, emulated.DefaultE1000EOptions())
	rec := &recorder{Device: p.Functions()[0]}
	o := e1000e.DefaultOptions()
	o.Queues = 2
	o.RxRing, o.TxRing = 64, 64
	o.Interrupts = true // and its moderation: EITR
	n, err := e1000e.Open(rec, o)
	if err != nil {
		t.Fatal(err)
	}
	rec.add("--- open done")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rec.log, "\n") + "\n"

	idx := func(prefix string, from int) int {
		for i := from; i < len(rec.log); i++ {
			if strings.HasPrefix(rec.log[i], prefix) {
				return i
			}
		}
		return -1
	}
	open := idx("--- open done", 0)
	rctlOn := -1
	for i := 0; i < open; i++ {
		var v uint32
		if _, err := fmt.Sscanf(rec.log[i], "write RCTL = %v", &v); err == nil && v&hw.RctlEN != 0 {
			rctlOn = i
		}
	}
	busMaster := -1
	for i := 0; i < open; i++ {
		var v uint16
		if _, err := fmt.Sscanf(rec.log[i], "config COMMAND = %v", &v); err == nil && v&pci.CommandBusMaster != 0 {
			busMaster = i
		}
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"IMC (mask all) is the first register write", idx("write", 0) == idx("write IMC = 0xffffffff", 0)},
		{"RX is disabled (RCTL = 0) before the reset (CTRL.RST)", idx("write RCTL = 0x00000000", 0) >= 0 && idx("write RCTL = 0x00000000", 0) < idx("write CTRL = 0x04", 0)},
		{"RCTL with EN comes once, after RFCTL, RXCSUM, MRQC, the rings and bus mastering", rctlOn > idx("write RFCTL", 0) && rctlOn > idx("write MRQC = 0x3", 0) && rctlOn > idx("write RDT1", 0) && rctlOn > busMaster && busMaster > 0},
		{"TARC is written before TCTL enables TX", idx("write TARC0", 0) >= 0 && idx("write TARC0", 0) < idx("write TCTL", idx("write TARC0", 0))},
		{"Close disables RX first thing", idx("write IMC = 0xffffffff", open) == open+1 && idx("write RCTL = 0x00000000", open) == open+2},
		{"Close stops bus mastering", idx("config COMMAND", open) > open},
		{"interrupts are moderated (EITR of the RX vectors = 50µs / 256 ns)", idx("write EITR0 = 0x000000c3", 0) > 0 && idx("write EITR1 = 0x000000c3", 0) > 0},
		{"RX causes are routed, auto-cleared and auto-masked", idx("write IVAR = 0x000a0098", 0) > 0 && idx("write EIAC = 0x00300000", 0) > 0 && idx("write IAM = 0x00300000", 0) > 0},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("bring-up order: %s: no", c.what)
		}
	}

	golden := filepath.Join("testdata", "bringup.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (create it with go test -run TestBringUpSequence -update)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("bring-up differs from %s at line %d:\n got %q\nwant %q\n(if the change is deliberate, run with -update and review the diff)", golden, i+1, g, w)
			}
		}
	}
}

// TestBringUpHeaderSplit records Open and Close with header split and
// checks, register by register, what the 82574 and QEMU 7.2 need for
// packet split receive: PSRCTL (buffer 0 and buffer 1 of 2 KiB, 2 and 3
// unused) and RFCTL (extended descriptors, fragments not split) before the
// RCTL write with EN, which carries DTYP=01; a ring of 32-byte descriptors;
// a tail that counts 16-byte units; and the reset values put back on Close.
func TestBringUpHeaderSplit(t *testing.T) {
	p := newModel(t, emulated.DefaultE1000EOptions())
	rec := &recorder{Device: p.Functions()[0]}
	o := e1000e.DefaultOptions()
	o.RxRing, o.TxRing = 64, 64
	o.HeaderSplit = true
	n, err := e1000e.Open(rec, o)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Info().HeaderSplit {
		t.Error("Info().HeaderSplit is false")
	}
	rec.add("--- open done")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	last := func(prefix string, from, to int) (int, uint32) {
		at, val := -1, uint32(0)
		for i := from; i < to; i++ {
			var v uint32
			if _, err := fmt.Sscanf(rec.log[i], prefix+" = %v", &v); err == nil {
				at, val = i, v
			}
		}
		return at, val
	}
	open := slices.Index(rec.log, "--- open done")
	rctlAt, rctl := last("write RCTL", 0, open)
	psAt, ps := last("write PSRCTL", 0, open)
	rfAt, rf := last("write RFCTL", 0, open)
	_, rdlen := last("write RDLEN0", 0, open)
	_, rdt := last("write RDT0", 0, open)
	_, psClose := last("write PSRCTL", open, len(rec.log))
	_, rfClose := last("write RFCTL", open, len(rec.log))
	for _, c := range []struct {
		what string
		ok   bool
	}{
		{fmt.Sprintf("RCTL = %#x has EN and DTYP=01 (bits 11:10)", rctl), rctl&hw.RctlEN != 0 && rctl>>10&3 == 1},
		{fmt.Sprintf("PSRCTL = %#x: BSIZE0 16 x 128 B, BSIZE1 2 x 1 KiB, BSIZE2 and BSIZE3 0", ps), ps == 16|2<<8},
		{fmt.Sprintf("RFCTL = %#x: EXTEN (bit 15) and IPFRSP_DIS (bit 14)", rf), rf == 1<<15|1<<14},
		{"PSRCTL and RFCTL are written before RCTL enables RX", psAt >= 0 && rfAt >= 0 && psAt < rctlAt && rfAt < rctlAt},
		{fmt.Sprintf("RDLEN0 = %d: 64 descriptors of 32 bytes", rdlen), rdlen == 64*32},
		{fmt.Sprintf("RDT0 = %d: 63 descriptors handed over, in 16-byte units", rdt), rdt == 2*63},
		{"Close puts PSRCTL and RFCTL back to 0", psClose == 0 && rfClose == 0},
	} {
		if !c.ok {
			t.Errorf("header split bring-up: %s: no", c.what)
		}
	}
}
