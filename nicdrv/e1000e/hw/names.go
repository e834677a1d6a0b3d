package hw

import "fmt"

// regNames names the registers by offset; per-queue registers carry their
// queue number (RDT0, TDT1).
var regNames = func() map[int]string {
	m := map[int]string{
		CTRL: "CTRL", STATUS: "STATUS", EECD: "EECD", EERD: "EERD", CTRLEXT: "CTRL_EXT", MDIC: "MDIC",
		VET: "VET", ICR: "ICR", ITR: "ITR", ICS: "ICS", IMS: "IMS", IMC: "IMC", EIAC: "EIAC", IAM: "IAM",
		IVAR: "IVAR", RCTL: "RCTL", TCTL: "TCTL", TIPG: "TIPG", EXTCNFCTRL: "EXTCNF_CTRL", PBA: "PBA",
		PSRCTL: "PSRCTL", RDTR: "RDTR", RADV: "RADV", TIDV: "TIDV", TADV: "TADV", RXCSUM: "RXCSUM",
		RFCTL: "RFCTL", MRQC: "MRQC", GCR: "GCR", SWSM: "SWSM", FWSM: "FWSM", GCR2: "GCR2",
	}
	for q := 0; q < Queues; q++ {
		for off, name := range map[int]string{RDBAL: "RDBAL", RDBAH: "RDBAH", RDLEN: "RDLEN", RDH: "RDH",
			RDT: "RDT", RXDCTL: "RXDCTL", TDBAL: "TDBAL", TDBAH: "TDBAH", TDLEN: "TDLEN", TDH: "TDH",
			TDT: "TDT", TXDCTL: "TXDCTL", TARC: "TARC"} {
			m[Q(off, q)] = fmt.Sprintf("%s%d", name, q)
		}
	}
	for v := 0; v < MSIXVectors; v++ {
		m[EITR(v)] = fmt.Sprintf("EITR%d", v)
	}
	for i := 0; i < RAREntries; i++ {
		m[RAL(i)] = fmt.Sprintf("RAL%d", i)
		m[RAH(i)] = fmt.Sprintf("RAH%d", i)
	}
	return m
}()

// RegName names the register at offset off in BAR0 as the 82574
// datasheet does, with the queue, vector or entry number where there are
// several ("RDT0", "EITR2", "RAH1", "MTA[5]", "stats 0x4074");
// an offset the 82574 does not define comes back in hex.
func RegName(off int) string {
	if s, ok := regNames[off]; ok {
		return s
	}
	switch {
	case off >= MTA && off < MTA+4*MTAEntries:
		return fmt.Sprintf("MTA[%d]", (off-MTA)/4)
	case off >= VFTA && off < VFTA+4*128:
		return fmt.Sprintf("VFTA[%d]", (off-VFTA)/4)
	case off >= RETA && off < RETA+4*(RETAEntries/4):
		return fmt.Sprintf("RETA[%d]", (off-RETA)/4)
	case off >= RSSRK && off < RSSRK+RSSKeyLen:
		return fmt.Sprintf("RSSRK[%d]", (off-RSSRK)/4)
	case off >= StatsFirst && off <= StatsLast:
		return fmt.Sprintf("stats %#04x", off)
	}
	return fmt.Sprintf("%#05x", off)
}
