package emulated

import (
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
)

// The wire between emulated NICs.
//
// Every NIC model has ports, and a port is plugged into at most one
// segment: a cable between two ports or a hub of more. The wire knows
// nothing of the models: a port is anything with a jack (its cable state
// and segment) that takes frames off the wire, so an 82599 model and an
// 82574L model, made by different platforms with different IOMMUs, can be
// cabled together. A frame a port transmits is handed, synchronously, to
// every other port of its segment whose cable is in; each receiving model
// then filters and DMAs it through its own IOMMU.
//
// A segment may carry transport/fault's seeded fault model (CableOptions):
// frames are lost, duplicated, held back and reordered, delayed, or
// corrupted. The wire then gives every frame an Ethernet FCS (CRC-32) as it
// enters the line and checks it where it leaves, so a corrupted frame
// reaches the receiving model marked with a bad FCS, which that model counts
// (CRCERRS) and drops, as a NIC does. A segment may also lose the frames
// a function of their bytes picks (CableOptions.Lose): a test's loss at
// an exact frame, where the fault model draws at random.

// wireEnd is what the wire needs of a model's port.
type wireEnd interface {
	// jack is the port's plug: its segment and cable state.
	jack() *jack
	// fromWire takes a frame off the wire. The frame is the caller's: the
	// model copies what it keeps. badFCS marks a frame whose FCS did not
	// check (corrupted on the wire).
	fromWire(fr []byte, badFCS bool)
	// setCable plugs (up) or pulls the port's cable; the model updates its
	// link state.
	setCable(up bool)
}

// jack is a port's attachment to the wire.
type jack struct {
	seg   atomic.Pointer[segment]
	cable atomic.Bool
}

// segment is one cable or hub: the ports a transmitted frame reaches, and
// the fault line frames cross. It is not changed once made; rewiring stores
// a new one.
type segment struct {
	ends []wireEnd
	line *fault.Line[wireEnd] // nil: a perfect wire
	lose func([]byte) bool    // CableOptions.Lose
}

// wireMu serialises rewiring, which may span platforms.
var wireMu sync.Mutex

// Port is one NIC port of an emulated platform, as the wire sees it: what
// Cable and Hub join. Get one from E1000E.Port or IXGBE.Port.
type Port struct{ end wireEnd }

// CableOptions configure a cable or hub.
type CableOptions struct {
	// Faults is the fault model frames meet on the wire (the zero value:
	// a perfect wire). Its Seed makes the pattern repeatable.
	Faults fault.Options
	// Lose, when set, is asked about every frame a port transmits (the
	// Ethernet frame without its FCS, the caller's only for the call)
	// before the fault model, and the wire loses each one it returns
	// true for: a loss at a frame picked by its contents, where Faults
	// draws at random. It is called on the transmitting goroutine, which
	// may hold a model's transmit lock, by two queues' walks at once: it
	// must be safe for concurrent use and not call into a model.
	Lose func(frame []byte) bool
}

// Cable joins ports a and b, of the same platform or of two, with a
// perfect cable whose link is up. A port is on at most one cable or hub;
// cabling it again moves it.
func Cable(a, b Port) error { return Connect(CableOptions{}, a, b) }

// Hub joins ports on one perfect hub, as QEMU's -netdev hubport does: a
// frame one of them transmits reaches every other (each NIC's receive
// filter then decides).
func Hub(ports ...Port) error { return Connect(CableOptions{}, ports...) }

// Connect joins ports (two: a cable; more: a hub) with the wire o
// describes. Ports leave their previous cable or hub.
func Connect(o CableOptions, ports ...Port) error {
	if len(ports) < 2 {
		return fmt.Errorf("emulated: a cable or hub of %d ports: want at least two", len(ports))
	}
	if err := o.Faults.Validate(); err != nil {
		return fmt.Errorf("emulated: cable: %w", err)
	}
	seen := map[wireEnd]bool{}
	for i, p := range ports {
		if p.end == nil {
			return fmt.Errorf("emulated: port %d of the cable is the zero Port: get ports from a platform's Port method", i)
		}
		if seen[p.end] {
			return errors.New("emulated: the same port twice on one cable or hub")
		}
		seen[p.end] = true
	}
	wireMu.Lock()
	defer wireMu.Unlock()
	seg := &segment{lose: o.Lose}
	if o.Faults.Active() {
		seg.line = fault.NewLine(o.Faults, deliver)
	}
	for _, p := range ports {
		detachLocked(p.end)
		seg.ends = append(seg.ends, p.end)
	}
	for _, e := range seg.ends {
		e.jack().seg.Store(seg)
		e.setCable(true)
	}
	return nil
}

// detachLocked takes e off its cable or hub; a port left alone loses its
// link, and a segment left with no port closes its fault line.
func detachLocked(e wireEnd) {
	old := e.jack().seg.Load()
	if old == nil {
		return
	}
	rest := &segment{line: old.line, lose: old.lose}
	for _, o := range old.ends {
		if o != e {
			rest.ends = append(rest.ends, o)
		}
	}
	for _, o := range rest.ends {
		if len(rest.ends) < 2 {
			o.jack().seg.Store(nil)
			o.setCable(false)
		} else {
			o.jack().seg.Store(rest)
		}
	}
	if len(rest.ends) < 2 && old.line != nil {
		old.line.Close()
	}
	e.jack().seg.Store(nil)
}

// setLink plugs (up) or unplugs the cable at e. On a cable between two
// ports both ends see the change; on a hub of more, only e does (as QEMU's
// set_link on one hubport).
func setLink(e wireEnd, up bool) {
	e.setCable(up)
	if seg := e.jack().seg.Load(); seg != nil && len(seg.ends) == 2 {
		for _, o := range seg.ends {
			if o != e {
				o.setCable(up)
			}
		}
	}
}

// wireFaults returns what e's segment's fault line did so far (zero
// counts on a perfect wire).
func wireFaults(e wireEnd) fault.Counts {
	if seg := e.jack().seg.Load(); seg != nil && seg.line != nil {
		return seg.line.Counts()
	}
	return fault.Counts{}
}

// toWire sends frame fr from e to the other ports of its segment. The
// frame stays the caller's. It is called without the model's locks, so a
// receiving model may take its own.
func toWire(e wireEnd, fr []byte) {
	j := e.jack()
	seg := j.seg.Load()
	if seg == nil || !j.cable.Load() {
		return
	}
	if seg.lose != nil && seg.lose(fr) {
		return
	}
	if seg.line == nil {
		for _, p := range seg.ends {
			if p != e && p.jack().cable.Load() {
				p.fromWire(fr, false)
			}
		}
		return
	}
	// The FCS goes on the frame before the line can corrupt it.
	buf := make([]byte, len(fr)+4)
	copy(buf, fr)
	c := crc32.ChecksumIEEE(fr)
	buf[len(fr)], buf[len(fr)+1], buf[len(fr)+2], buf[len(fr)+3] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
	seg.line.Lock()
	seg.line.Frame(time.Now(), e, transport.NICID(0), buf, deliver)
	seg.line.Unlock()
}

// wireTaker is a wireEnd that can keep a frame off the wire for later
// (an 82599 with AsyncDMA: its packet buffer) and so may take the
// sender's buffer itself rather than a copy.
type wireTaker interface {
	// takeFromWire does what fromWire(fr, false) does but keeps fr
	// itself, and returns a buffer of its own the caller keeps in fr's
	// place (nil when it has none); taken false: it kept nothing and did
	// nothing, and fromWire must be called.
	takeFromWire(fr []byte) (back []byte, taken bool)
}

// handOff sends frame fr from e as toWire does, on a perfect cable to a
// model that keeps frames for later (wireTaker) without a copy: that
// model takes fr, and handOff returns the buffer the caller keeps in its
// place (nil for none). Otherwise it returns fr, still the caller's.
func handOff(e wireEnd, fr []byte) []byte {
	j := e.jack()
	seg := j.seg.Load()
	if seg == nil || !j.cable.Load() || seg.line != nil || seg.lose != nil || len(seg.ends) != 2 {
		toWire(e, fr)
		return fr
	}
	p := seg.ends[0]
	if p == e {
		p = seg.ends[1]
	}
	if p == e || !p.jack().cable.Load() {
		return fr
	}
	if t, ok := p.(wireTaker); ok {
		if back, taken := t.takeFromWire(fr); taken {
			return back
		}
	}
	p.fromWire(fr, false)
	return fr
}

// deliver hands a frame that crossed the fault line to every port of its
// sender's segment (as it is now) but the sender, checking its FCS.
func deliver(it fault.Item[wireEnd]) {
	seg := it.Tag.jack().seg.Load()
	if seg == nil {
		return
	}
	d := it.Data
	if len(d) < 4 {
		return
	}
	fr := d[:len(d)-4]
	c := crc32.ChecksumIEEE(fr)
	bad := d[len(d)-4] != byte(c) || d[len(d)-3] != byte(c>>8) || d[len(d)-2] != byte(c>>16) || d[len(d)-1] != byte(c>>24)
	for range it.Copies {
		for _, p := range seg.ends {
			if p != it.Tag && p.jack().cable.Load() {
				p.fromWire(fr, bad)
			}
		}
	}
}
