package drv

import (
	"testing"

	e1000ehw "github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	ixgbehw "github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// TestSharedStatRegs checks that the statistics registers ReadStats reads
// are, at the same offsets, each NIC's own as its hw package names them.
func TestSharedStatRegs(t *testing.T) {
	for nic, own := range map[string]map[string]int{
		"82574L": {
			"CRCERRS": e1000ehw.CRCERRS, "GPRC": e1000ehw.GPRC, "BPRC": e1000ehw.BPRC, "MPRC": e1000ehw.MPRC,
			"GPTC": e1000ehw.GPTC, "GORCL": e1000ehw.GORCL, "GOTCL": e1000ehw.GOTCL, "RUC": e1000ehw.RUC,
			"ROC": e1000ehw.ROC, "TORL": e1000ehw.TORL, "TPR": e1000ehw.TPR, "TPT": e1000ehw.TPT,
			"MPTC": e1000ehw.MPTC, "BPTC": e1000ehw.BPTC,
		},
		"82599": {
			"CRCERRS": ixgbehw.CRCERRS, "GPRC": ixgbehw.GPRC, "BPRC": ixgbehw.BPRC, "MPRC": ixgbehw.MPRC,
			"GPTC": ixgbehw.GPTC, "GORCL": ixgbehw.GORCL, "GOTCL": ixgbehw.GOTCL, "RUC": ixgbehw.RUC,
			"ROC": ixgbehw.ROC, "TORL": ixgbehw.TORL, "TPR": ixgbehw.TPR, "TPT": ixgbehw.TPT,
			"MPTC": ixgbehw.MPTC, "BPTC": ixgbehw.BPTC,
		},
	} {
		for name, off := range StatRegs {
			if got, ok := own[name]; !ok || got != off {
				t.Errorf("%s: ReadStats reads %s at %#x, the NIC has it at %#x", nic, name, off, got)
			}
		}
	}
}
