package main

import (
	"errors"
	"flag"
	"fmt"
	"math/bits"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	ixgbehw "github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/vfio"
)

// nicFlags select the NICs of a --transport nic run: both boards are in
// this process, each on one of two cabled NICs driven from user space by
// gomx's drivers through VFIO (package nicdrv/ixgbe for an 82599,
// nicdrv/e1000e for an 82574L, chosen by the PCI device ID), or on two
// emulated 82574Ls ("model") or 82599s ("model-82599") cabled in memory.
type nicFlags struct {
	nics string
	// interrupts is --nic-interrupts; unset, an 82599 with --queues
	// sleeps on unmoderated interrupts and every other NIC polls.
	interrupts optBool
	// queues is --queues: the NICs then run that many queue pairs and
	// the transports UDP framing, for queued boards.
	queues int
	// place is --nic-place: the NICs place received payloads.
	place bool
	// syncDMA is --nic-sync-dma: the emulated 82599s do their DMA on
	// the goroutine that writes the transmit tail instead of on DMA
	// engines of their own (emulated.IXGBEOptions.AsyncDMA).
	syncDMA bool
	// mtu is --nic-mtu: the link MTU (1500, or jumbo frames up to 9000
	// on 82599s).
	mtu int
}

func (n *nicFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.nics, "nic", envOr("MXBENCH_NIC", ""), "nic: two cabled 82574Ls or 82599s bound to vfio-pci as PCI addresses A,B (e.g. 0000:00:01.0,0000:00:02.0), or \"model\" for two emulated 82574Ls, \"model-82599\" for two emulated 82599s (env MXBENCH_NIC)")
	fs.Var(&n.interrupts, "nic-interrupts", "nic: sleep on MSI-X interrupts instead of polling the RX ring (on by default for overlap with --wait block; 82599s with --queues: the default, and unmoderated, given or not; --nic-interrupts=false polls)")
	fs.BoolVar(&n.syncDMA, "nic-sync-dma", false, "nic model-82599: have the goroutine that writes a NIC's transmit tail do that NIC's transmit DMA and the peer's receive DMA (reading the sender's memory, writing the receiver's) before the write returns, as the model's tests do; by default each emulated NIC does its own transmit and receive DMA on engine goroutines of its own (a transmit and a receive engine), as a NIC does beside the CPU, and the run gets one more GOMAXPROCS per NIC for them (docs/zero-copy.md)")
	fs.IntVar(&n.mtu, "nic-mtu", 1500, "nic: the link MTU, 1500 or, on 82599s, jumbo frames up to 9000: the NICs are opened for frames of MTU + 18 bytes (MTU + 14 with --nic-place and no --nic-queues: its lanes strip VLAN tags) in receive buffers of the next power of two (SRRCTL.BSIZEPACKET up to 16 KiB), so each frame, placed or not, takes one descriptor (a VLAN-tagged one too, 4 bytes longer); each queue's pool then holds 3413 such buffers, per NIC 13 MiB up to MTU 4074, 27 MiB to 8170, 53 MiB above (85 MiB with --nic-place's 4 placing queues of 512 more), and mx cuts pull replies and medium fragments for the larger frames (a pull reply carries MTU - 18 bytes of payload, MTU - 50 when placed; docs/zero-copy.md)")
	fs.BoolVar(&n.place, "nic-place", false, "nic: open the NICs (82599s: header split; 82574Ls: packet split) with payload placement, so a large message's pull replies land in the receive buffer, written by the NIC (docs/zero-copy.md); needs zero copy and --no-checksum to take effect")
}

// sleepWhenBlocking turns --nic-interrupts on for overlap over --transport
// nic with --wait block unless it was given: that run's boards sleep, and
// so does the driver's receive wait, on the queues' MSI-X vectors.
// Polling, the driver looks at the rings between 20 µs sleeps whenever no
// frame comes, tens of thousands of wake-ups a second on the CPUs the
// application computes on, which cost an overlap run's rank 0 twice the
// CPU per 4 MiB exchange (docs/zero-copy.md, Measuring). pingpong and
// stream keep polling unless asked, as their figures were measured. It
// runs before the flags are validated, which then see what the run uses.
func (f *benchFlags) sleepWhenBlocking(cmd string) {
	if cmd != "overlap" || f.transport != "nic" || f.wait != "block" {
		return
	}
	if !f.nic.interrupts.set {
		f.nic.interrupts.v = true
	}
}

// addrs parses --nic; nil for a model.
func (n *nicFlags) addrs() ([]pci.Address, error) {
	if n.nics == "model" || n.nics == "model-82599" {
		return nil, nil
	}
	return parsePair("--nic", n.nics, `two PCI addresses A,B of cabled NICs, or "model" (emulated 82574Ls) or "model-82599"`, "NICs", pci.ParseAddress)
}

// parsePair parses a flag's value as two distinct devices A,B cabled to
// each other, each read by parse; want says what the flag takes and noun
// names the devices in the error for a device named twice.
func parsePair[T comparable](flag, val, want, noun string, parse func(string) (T, error)) ([]T, error) {
	parts := strings.Split(val, ",")
	if len(parts) != 2 {
		return nil, fmt.Errorf("%s %q: want %s", flag, val, want)
	}
	var out []T
	for _, p := range parts {
		d, err := parse(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		out = append(out, d)
	}
	if out[0] == out[1] {
		return nil, fmt.Errorf("%s names %v twice: want two %s cabled to each other", flag, out[0], noun)
	}
	return out, nil
}

func (n *nicFlags) validate(cmd, tr, peer string) error {
	if tr != "nic" {
		if n.nics != "" || n.interrupts.set || n.place || n.syncDMA || n.mtu != 1500 {
			return usagef(cmd, "--nic, --nic-interrupts, --nic-place, --nic-sync-dma and --nic-mtu need --transport nic")
		}
		return nil
	}
	if n.mtu < 1500 || n.mtu > maxMTU {
		return usagef(cmd, "--nic-mtu %d: want 1500..%d (jumbo frames on 82599s)", n.mtu, maxMTU)
	}
	if n.mtu > 1500 && n.nics == "model" {
		return usagef(cmd, "--nic-mtu %d: gomx's 82574L driver takes 1500-byte frames only; use --nic model-82599", n.mtu)
	}
	if n.syncDMA && n.nics != "model-82599" {
		return usagef(cmd, "--nic-sync-dma chooses how the emulated 82599s do their DMA: it needs --nic model-82599")
	}
	if peer != "" {
		return usagef(cmd, "--transport nic runs both sides in this process on two cabled NICs: drop --peer")
	}
	if n.nics == "" {
		return usagef(cmd, "--transport nic needs --nic A,B (two cabled 82574Ls or 82599s bound to vfio-pci), --nic model or --nic model-82599")
	}
	if _, err := n.addrs(); err != nil {
		return usagef(cmd, "%v", err)
	}
	return nil
}

// transports opens the two NICs and a transport on each. Closing both
// transports releases the devices and the container (or the model).
func (n *nicFlags) transports() (a, b transport.Transport, what string, nw *loopback.Network, err error) {
	addrs, err := n.addrs()
	if err != nil {
		return nil, nil, "", nil, err
	}
	var devs [2]pci.Device
	var release func() error
	switch {
	case addrs == nil && n.nics == "model-82599":
		o := emulated.DefaultIXGBEOptions()
		o.AsyncDMA = !n.syncDMA
		p, err := emulated.NewIXGBE(o)
		if err != nil {
			return nil, nil, "", nil, err
		}
		devs[0], devs[1] = p.Functions()[0], p.Functions()[1]
		release = p.Close
		what = "nic: gomx's ixgbe driver on two emulated 82599s, DMA on the transmit tail's writer"
		if !n.syncDMA {
			// A processor for each NIC's busy DMA engine (in a
			// one-way exchange the sender's transmit engine and the
			// receiver's receive engine; the other two move only
			// PULLs and acks): busy-polling boards hold a P each and
			// yield their thread, not their P (mx's sched_yield), so
			// without one of its own an engine would wait for the
			// runtime's preemption (10 ms) between passes. A P per
			// engine, four, moved nothing measurable. The engines'
			// threads then share the host's CPUs with the boards', as
			// the OS schedules them.
			procs := runtime.GOMAXPROCS(0)
			runtime.GOMAXPROCS(procs + 2)
			release = func() error {
				err := p.Close()
				runtime.GOMAXPROCS(procs)
				return err
			}
			what = "nic: gomx's ixgbe driver on two emulated 82599s, DMA on engines of each NIC's own (one more P each)"
		}
	case addrs == nil:
		p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
		if err != nil {
			return nil, nil, "", nil, err
		}
		devs[0], devs[1] = p.Functions()[0], p.Functions()[1]
		release = p.Close
		what = "nic: gomx's e1000e driver on two emulated 82574Ls"
	default:
		o := vfio.DefaultOptions()
		c, err := vfio.OpenContainer(o)
		if err != nil {
			return nil, nil, "", nil, fmt.Errorf("nic: %w", err)
		}
		var opened []*vfio.Device
		release = func() error {
			var errs []error
			for _, d := range opened {
				errs = append(errs, d.Close())
			}
			return errors.Join(append(errs, c.Close())...)
		}
		for i, ad := range addrs {
			d, err := c.Open(ad)
			if err != nil {
				release()
				return nil, nil, "", nil, fmt.Errorf("nic %v: %w (is it bound to vfio-pci?)", ad, err)
			}
			opened = append(opened, d)
			devs[i] = d
		}
		what = fmt.Sprintf("nic: gomx's %s driver on %v <-> %v through VFIO", driverName(devs[0]), addrs[0], addrs[1])
	}
	var once sync.Once
	left := 2
	var mu sync.Mutex
	done := func() error {
		mu.Lock()
		left--
		last := left == 0
		mu.Unlock()
		var err error
		if last {
			once.Do(func() { err = release() })
		}
		return err
	}
	var ts [2]transport.Transport
	irq := false
	for i, d := range devs {
		drv, err := openDriver(d, n.interrupts, n.queues, n.place, n.mtu, addrs == nil)
		if err == nil {
			irq = drv.Info().Interrupts
		}
		if err == nil {
			var t *nic.Transport
			o := nic.Options{}
			if n.mtu != 1500 {
				o.MTU = n.mtu
			}
			if n.queues > 0 {
				o.Framing, o.UDP = nic.FramingUDP, queuedUDP(i)
			}
			if t, err = nic.New(drv, o); err == nil {
				ts[i] = &nicTransport{Transport: t, done: done}
				continue
			}
			drv.Close()
		}
		if i == 1 {
			ts[0].Close() // one of the two done calls: release the rest here
		}
		once.Do(func() { release() })
		if n.queues > 0 {
			err = fmt.Errorf("%w (--queues %d: the 82574 has 2 queue pairs, the 82599 64; lower --queues)", err, n.queues)
		}
		return nil, nil, "", nil, fmt.Errorf("nic %v: %w", d.Address(), err)
	}
	switch {
	case irq && n.queues > 0 && is82599(devs[0]):
		what += ", unmoderated MSI-X interrupts"
	case irq:
		what += ", MSI-X interrupts"
	}
	if n.queues > 0 {
		what += ", UDP framing"
	}
	if n.mtu != 1500 {
		what += fmt.Sprintf(", MTU %d (jumbo frames)", n.mtu)
	}
	return ts[0], ts[1], what, nil, nil
}

// is82599 tells whether d is an 82599, by its PCI IDs.
func is82599(d pci.Device) bool {
	vid, err1 := pci.ReadConfig16(d, pci.ConfigVendorID)
	did, err2 := pci.ReadConfig16(d, pci.ConfigDeviceID)
	return err1 == nil && err2 == nil && ixgbehw.Is82599(vid, did)
}

// driverName names the driver openDriver picks for d.
func driverName(d pci.Device) string {
	if is82599(d) {
		return "ixgbe"
	}
	return "e1000e"
}

// placeLanes is how many queues an 82599 opened with --nic-place keeps
// for placement alone, one a pull: the pulls mx runs at once by default
// (BoardOptions.PullFrames / (PullBlocks x PullBlockFrames) = 4).
const placeLanes = 4

// txRing82599 is the 82599's TX ring: room for the replies mx's pulls
// ask for at once (BoardOptions.PullFrames, 512) sent in place, two
// descriptors each (header and payload), and the frames around them. With
// the driver's default of 512 the sender's TX ring held half of them: the
// rest waited in Send, which yields until the NIC has sent enough
// (nic_tx_ring_full), holding the board's sending goroutine, and over the
// emulated pair taking the CPU the NICs' DMA engines need to send them.
const txRing82599 = 2048

// maxMTU is the largest --nic-mtu: ixgbe's largest frame (9018 bytes)
// less the Ethernet header and a VLAN tag.
const maxMTU = 9000

// openDriver opens d with gomx's driver for it: ixgbe for an 82599
// (placing payloads on lanes with place; for frames of an mtu above 1500
// in receive buffers that hold them whole), e1000e otherwise (which refuses
// what is not an 82574L; placing payloads on its one receive queue with
// place), with queues queue pairs (the driver's default when 0). model
// says d is an emulated NIC, whose large pools then take base pages
// rather than the host's hugepages. With interrupts (irq, or irq unset
// on an 82599 with queues) WaitRx sleeps on MSI-X vectors, unmoderated on
// an 82599 with queues (ixgbe.Options.NoModeration) so that a frame wakes
// its queue's thread at once: mx's queues' threads then sleep where
// polling handed a locked thread's processor back and forth at every look
// (docs/nics.md).
func openDriver(d pci.Device, irq optBool, queues int, place bool, mtu int, model bool) (nicdrv.NIC, error) {
	if is82599(d) {
		o := ixgbe.DefaultOptions()
		o.Interrupts = irq.v || !irq.set && queues > 0
		o.NoModeration = o.Interrupts && queues > 0
		o.Placement = place
		o.TxRing = txRing82599
		if mtu > 1500 {
			o.MaxFrame = mtu + 18
			// A buffer holds a VLAN-tagged frame too, 4 bytes longer.
			o.BufferSize = 1 << bits.Len(uint(o.MaxFrame+4-1))
		}
		if o.BufferSize > nicdrv.BufferSize {
			// A queue's pool holds its RX ring, its TX ring of copied
			// sends and the transport's lends (a quarter of the pool):
			// (512+2048)*4/3 = 3413 buffers, 53 MiB at 16 KiB (the
			// default, twice both rings, would be 80 MiB).
			o.PoolBuffers = (o.RxRing + o.TxRing) * 4 / 3
			if model {
				o.Memory.PageSize = hugepage.Size4K
			}
		}
		if queues > 0 {
			o.Queues = queues
		} else if place {
			// Queue 0 and a lane a pull (transport/nic place.go): as
			// many as pulls run at once with mx's defaults. Frames of
			// the MTU untagged (the lanes strip tags), so a lane's
			// spans are a full reply's payload and the last reply of a
			// message is placed too (docs/zero-copy.md).
			o.Queues, o.PlaceOnly = 1+placeLanes, placeLanes
			o.MaxFrame = mtu + 14
		}
		nic, err := ixgbe.Open(d, o)
		if err != nil && o.Interrupts && errors.Is(err, nicdrv.ErrNotSupported) {
			// Its MSI-X vectors would not open (the only thing Open
			// refuses so): --queues asked for them without the flag.
			err = fmt.Errorf("%w, or --nic-interrupts=false", err)
		}
		return nic, err
	}
	if mtu > 1500 {
		return nil, fmt.Errorf("--nic-mtu %d: gomx's 82574L driver takes 1500-byte frames only; use 82599s or --nic-mtu 1500", mtu)
	}
	o := e1000e.DefaultOptions()
	o.Interrupts = irq.v
	o.Placement = place
	if queues > 0 {
		o.Queues = queues
	}
	return e1000e.Open(d, o)
}

// nicTransport closes the devices under it after the last of the pair.
type nicTransport struct {
	*nic.Transport
	done   func() error
	closed sync.Once
}

func (t *nicTransport) Close() error {
	err := t.Transport.Close()
	t.closed.Do(func() { err = errors.Join(err, t.done()) })
	return err
}

// optBool is a boolean flag that knows whether it was given.
type optBool struct{ v, set bool }

func (b *optBool) String() string {
	if b == nil {
		return "false"
	}
	return strconv.FormatBool(b.v)
}

func (b *optBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.v, b.set = v, true
	return nil
}

// IsBoolFlag lets the flag be given without a value (flag.boolFlag).
func (b *optBool) IsBoolFlag() bool { return true }
