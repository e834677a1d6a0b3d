package emulated

// NICAccesses counts what a driver's use of one emulated NIC costs the
// device: register accesses (on a real NIC each is a PCIe round trip for a
// read, a posted write otherwise; under QEMU an exit of the vCPU) and
// descriptor DMA. A fast path that reads no register and writes one tail
// per batch shows here.
type NICAccesses struct {
	// Reads and Writes count register accesses by register name ("RDT0",
	// "ICR", ...).
	Reads, Writes map[string]uint64
	// RxDescFetches and RxDescWriteBacks count RX descriptors the NIC read
	// (to take a buffer) and wrote back (a received frame's status).
	RxDescFetches, RxDescWriteBacks uint64
	// TxDescFetches counts TX descriptors the NIC read, TxDescWriteBacks
	// those it wrote back done (those the driver marked RS).
	TxDescFetches, TxDescWriteBacks uint64
}

// TotalReads is the number of register reads.
func (a NICAccesses) TotalReads() uint64 { return sum(a.Reads) }

// TotalWrites is the number of register writes.
func (a NICAccesses) TotalWrites() uint64 { return sum(a.Writes) }

func sum(m map[string]uint64) uint64 {
	var t uint64
	for _, v := range m {
		t += v
	}
	return t
}

// regAccesses is what a model counts under its lock for NICAccesses:
// register accesses by offset, descriptor DMA.
type regAccesses struct {
	reads, writes                map[int]uint64
	rxFetch, rxWB, txFetch, txWB uint64
}

func (a *regAccesses) count(m *map[int]uint64, off int) { a.add(m, off, 1) }

// add counts k accesses at off.
func (a *regAccesses) add(m *map[int]uint64, off int, k uint64) {
	if *m == nil {
		*m = map[int]uint64{}
	}
	(*m)[off] += k
}

// named turns the counts into NICAccesses, naming registers with name.
func (a regAccesses) named(name func(int) string) NICAccesses {
	conv := func(m map[int]uint64) map[string]uint64 {
		out := make(map[string]uint64, len(m))
		for off, v := range m {
			out[name(off)] += v
		}
		return out
	}
	return NICAccesses{Reads: conv(a.reads), Writes: conv(a.writes),
		RxDescFetches: a.rxFetch, RxDescWriteBacks: a.rxWB, TxDescFetches: a.txFetch, TxDescWriteBacks: a.txWB}
}
