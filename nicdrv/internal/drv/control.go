package drv

import (
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/nicdrv"
)

// Control is a NIC's control-path state, the same in every driver: the
// lock that serializes statistics, filters, rules and Close, the closed
// flag every batch looks at, the sum of the NIC's clear-on-read counters,
// and the queues' software counters. A driver keeps one in its Device and
// registers each queue's counters with AddRx and AddTx at Open.
type Control struct {
	// Closed is set once by Close; every call that touches the NIC
	// looks at it (first: the data path reads it).
	Closed atomic.Bool
	// Mu serializes the control path: statistics, filters, rules, link
	// changes and Close.
	Mu sync.Mutex
	// HWStat sums what the NIC's clear-on-read counters held at each
	// read (under Mu).
	HWStat nicdrv.Stats
	// Intr counts the interrupts consumed (RxWaiter.Count).
	Intr atomic.Uint64

	rx []*RxCounters
	tx []*TxCounters
}

// RxCounters are an RX queue's software counters, kept in the queue and
// counted on its fast path by a plain atomic add (no call).
type RxCounters struct {
	// NoBuf counts the refills the pool could not give a buffer
	// (Stats.RxNoBuffer); Dropped the frames the driver dropped
	// (Stats.RxDropped).
	NoBuf, Dropped atomic.Uint64
}

// TxCounters are a TX queue's software counters, as RxCounters.
type TxCounters struct {
	// Full counts the frames refused for a full ring (Stats.TxRingFull);
	// Rejected the frames refused as unsendable (Stats.TxRejected).
	Full, Rejected atomic.Uint64
}

// AddRx registers an RX queue's counters for Stats (at Open, before the
// NIC is handed out).
func (c *Control) AddRx(r *RxCounters) { c.rx = append(c.rx, r) }

// AddTx registers a TX queue's counters for Stats, as AddRx.
func (c *Control) AddTx(t *TxCounters) { c.tx = append(c.tx, t) }

// Stats is nicdrv.NIC.Stats: under Mu, read adds the NIC's clear-on-read
// counters to HWStat; the queues' software counters and the interrupts
// are added to a copy of it.
func (d *Device) Stats(read func(*nicdrv.Stats)) (nicdrv.Stats, error) {
	d.Mu.Lock()
	if d.Closed.Load() {
		// Checked under Mu, which Close holds while it tears the NIC
		// down: a Stats that waited for it reads no register after.
		d.Mu.Unlock()
		return nicdrv.Stats{}, d.Errorf("stats", nicdrv.ErrClosed)
	}
	read(&d.HWStat)
	s := d.HWStat
	d.Mu.Unlock()
	for _, r := range d.rx {
		s.RxNoBuffer += r.NoBuf.Load()
		s.RxDropped += r.Dropped.Load()
	}
	for _, t := range d.tx {
		s.TxRingFull += t.Full.Load()
		s.TxRejected += t.Rejected.Load()
	}
	s.Interrupts = d.Intr.Load()
	return s, nil
}

// Read64 reads the 64-bit counter whose low half is at register lo, the
// low half first: on both NICs (and in QEMU's e1000e) reading the high
// half clears the counter.
func (d *Device) Read64(lo int) uint64 {
	l := uint64(d.Regs.Read32(lo))
	return l | uint64(d.Regs.Read32(lo+4))<<32
}

// Locked runs f under Mu unless the NIC is closed, which it reports as
// nicdrv.ErrClosed of operation op: the shape of every control call that
// writes registers (filters, rules, promiscuous mode).
func (d *Device) Locked(op string, f func() error) error {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	if d.Closed.Load() {
		return d.Errorf(op, nicdrv.ErrClosed)
	}
	return f()
}

// SetMulticast is nicdrv.NIC.SetMulticast for a NIC that keeps the
// 4096-bit multicast table (MulticastTable) in 128 registers from mta,
// its groups placed by hash.
func (d *Device) SetMulticast(groups []nicdrv.MAC, hash func([6]byte) (reg, bit int), mta int) error {
	t, err := MulticastTable(groups, hash)
	if err != nil {
		return d.Errorf("MTA", err)
	}
	return d.Locked("MTA", func() error {
		for i, v := range t {
			d.Regs.Write32(mta+4*i, v)
		}
		return nil
	})
}

// The statistics registers the 82574L and the 82599 keep at the same
// offsets (each driver's hw package names them too, and its test checks
// that they agree). All clear on read.
const (
	statCRCERRS = 0x4000 // CRC errors
	statGPRC    = 0x4074 // good packets received
	statBPRC    = 0x4078 // broadcast packets received
	statMPRC    = 0x407C // multicast packets received
	statGPTC    = 0x4080 // good packets transmitted
	statGORCL   = 0x4088 // good octets received, low half
	statGOTCL   = 0x4090 // good octets transmitted, low half
	statRUC     = 0x40A4 // undersize frames received
	statROC     = 0x40AC // oversize frames received
	statTORL    = 0x40C0 // total octets received, low half
	statTPR     = 0x40D0 // total packets received
	statTPT     = 0x40D4 // total packets transmitted
	statMPTC    = 0x40F0 // multicast packets transmitted
	statBPTC    = 0x40F4 // broadcast packets transmitted
)

// StatRegs are the offsets of the shared statistics registers, by name,
// for the drivers' hw tests.
var StatRegs = map[string]int{
	"CRCERRS": statCRCERRS, "GPRC": statGPRC, "BPRC": statBPRC, "MPRC": statMPRC, "GPTC": statGPTC,
	"GORCL": statGORCL, "GOTCL": statGOTCL, "RUC": statRUC, "ROC": statROC, "TORL": statTORL,
	"TPR": statTPR, "TPT": statTPT, "MPTC": statMPTC, "BPTC": statBPTC,
}

// ReadStats adds the shared clear-on-read counters to s: frames, bytes,
// broadcast and multicast received and sent, and the CRC, undersize and
// oversize errors (RxErrors). It reads (and so clears) the totals that
// Stats does not report too. A driver adds its own registers (missed
// frames, other errors) around it.
func (d *Device) ReadStats(s *nicdrv.Stats) {
	r := d.Regs.Read32
	s.RxErrors += uint64(r(statCRCERRS)) + uint64(r(statRUC)) + uint64(r(statROC))
	s.RxFrames += uint64(r(statGPRC))
	s.RxBroadcast += uint64(r(statBPRC))
	s.RxMulticast += uint64(r(statMPRC))
	s.TxFrames += uint64(r(statGPTC))
	s.RxBytes += d.Read64(statGORCL)
	s.TxBytes += d.Read64(statGOTCL)
	r(statTPR)
	r(statTPT)
	d.Read64(statTORL)
	r(statMPTC)
	r(statBPTC)
}
