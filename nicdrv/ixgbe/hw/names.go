package hw

import "fmt"

// regNames names the registers by offset; per-queue and per-vector
// registers carry their index (RDT3, TDT0, EITR5).
var regNames = func() map[int]string {
	m := map[int]string{
		CTRL: "CTRL", STATUS: "STATUS", CTRLEXT: "CTRL_EXT", EICR: "EICR", EICS: "EICS", EIAC: "EIAC",
		EIMS: "EIMS", EIMC: "EIMC", EIAM: "EIAM", GPIE: "GPIE", IVARMisc: "IVAR_MISC", RDRXCTL: "RDRXCTL",
		RXCTRL: "RXCTRL", RXCSUM: "RXCSUM", FCTRL: "FCTRL", VLNCTRL: "VLNCTRL", MCSTCTRL: "MCSTCTRL", MRQC: "MRQC", HLREG0: "HLREG0",
		MAXFRS: "MAXFRS", AUTOC: "AUTOC", LINKS: "LINKS", RTTDCS: "RTTDCS", DMATXCTL: "DMATXCTL",
		DTXMXSZ: "DTXMXSZRQ", MTQC: "MTQC", EEC: "EEC", FDIRCTRL: "FDIRCTRL", FDIRIPSA: "FDIRIPSA",
		FDIRIPDA: "FDIRIPDA", FDIRPORT: "FDIRPORT", FDIRVLAN: "FDIRVLAN", FDIRHASH: "FDIRHASH", FDIRCMD: "FDIRCMD",
		FDIRFREE: "FDIRFREE", FDIRDIP4M: "FDIRDIP4M", FDIRSIP4M: "FDIRSIP4M", FDIRTCPM: "FDIRTCPM",
		FDIRUDPM: "FDIRUDPM", FDIRMATCH: "FDIRMATCH", FDIRMISS: "FDIRMISS", FDIRHKEY: "FDIRHKEY",
		FDIRSKEY: "FDIRSKEY", FDIRM: "FDIRM", FDIRIP6M: "FDIRIP6M",
	}
	for i := range 2 {
		m[EIMSEx(i)], m[EIMCEx(i)], m[EIAMEx(i)] = fmt.Sprintf("EIMS_EX%d", i), fmt.Sprintf("EIMC_EX%d", i), fmt.Sprintf("EIAM_EX%d", i)
	}
	for q := 0; q < MaxQueuePairs; q++ {
		for name, off := range map[string]int{"RDBAL": RDBAL(q), "RDBAH": RDBAH(q), "RDLEN": RDLEN(q), "RDH": RDH(q),
			"RDT": RDT(q), "RXDCTL": RXDCTL(q), "SRRCTL": SRRCTL(q), "TDBAL": TDBAL(q), "TDBAH": TDBAH(q),
			"TDLEN": TDLEN(q), "TDH": TDH(q), "TDT": TDT(q), "TXDCTL": TXDCTL(q), "EITR": EITR(q), "IVAR": IVAR(q)} {
			m[off] = fmt.Sprintf("%s%d", name, q)
		}
	}
	return m
}()

// RegName names the register at offset off ("RDT3", "FDIRCMD"), or gives
// its offset in hex when it has no name here.
func RegName(off int) string {
	if s, ok := regNames[off]; ok {
		return s
	}
	return fmt.Sprintf("%#x", off)
}
