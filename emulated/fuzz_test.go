package emulated

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/ioat/hw"
)

// FuzzDescriptor feeds arbitrary 64-byte descriptors to a channel: the model
// must either execute one (only when hw.Validate accepts it) or halt with
// CHANERR bits set, and never panic or hang.
func FuzzDescriptor(f *testing.F) {
	seed := func(d hw.Descriptor) {
		b := make([]byte, 64)
		d.Encode(b)
		f.Add(b)
	}
	seed(hw.Descriptor{Size: 64, Ctl: hw.OpCopy << hw.CtlOpShift})
	seed(hw.Descriptor{Size: 8, Ctl: hw.CtlNull | hw.CtlComplWrite})
	seed(hw.Descriptor{Size: 100, Ctl: hw.OpFill<<hw.CtlOpShift | hw.CtlFence, Src: 0xAA55})
	seed(hw.Descriptor{Size: 0})
	seed(hw.Descriptor{Size: 1 << 30, Ctl: 0x87 << hw.CtlOpShift})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < 64 {
			return
		}
		r := newRig(t, CBDMAOptions{})
		var d hw.Descriptor
		d.Decode(raw)
		// Point addresses into the rig's memory half the time, so data
		// paths run, not just the address checks.
		if d.Src&1 == 0 {
			d.Src = r.iova(rigData) + d.Src%(32<<10)
		}
		if d.Dst&1 == 0 {
			d.Dst = r.iova(rigData+32<<10) + d.Dst%(32<<10)
		}
		d.Next = r.iova(rigRing + 64)
		if raw[0]&1 == 1 {
			d.Size %= 64 << 10
		}
		d.Encode(r.mem[rigRing:])
		valid := d.Validate(20, hw.CapFill|hw.CapPageBreak|hw.CapDCA) == 0
		r.start()
		r.regs.Write16(r.ch(hw.ChanDMACount), 1)
		deadline := time.Now().Add(5 * time.Second)
		for {
			st := hw.StatusState(r.regs.Read64(r.ch(hw.ChanSts)))
			if st == hw.StateIdle {
				if !valid {
					t.Fatalf("model executed a descriptor Validate refuses: %+v", d)
				}
				return
			}
			if st == hw.StateHalted {
				if r.regs.Read32(r.ch(hw.ChanErr)) == 0 {
					t.Fatalf("halted without CHANERR on %+v", d)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("descriptor %+v neither completed nor halted", d)
			}
			time.Sleep(time.Microsecond)
		}
	})
}

// FuzzRegisterWrites applies arbitrary register and config writes to a
// channel: the model may halt or flag violations, but must not panic,
// deadlock, or do DMA outside mapped memory.
func FuzzRegisterWrites(f *testing.F) {
	f.Add([]byte{0x86, 0, 1, 0x0D, 0, 0, 0, 0, 0, 0, 0x84, 0, 8, 0x20, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x90, 0, 3, 0x40, 0, 0, 0, 1, 0, 0, 0, 0x86, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		r := newRig(t, CBDMAOptions{Version: []uint8{hw.Ver32, hw.Ver33, hw.Ver34}[len(prog)%3], ResetDelay: time.Microsecond})
		for i := 0; i+11 <= len(prog) && i < 11*64; i += 11 {
			off := int(binary.LittleEndian.Uint16(prog[i:])) % 0x200
			v := binary.LittleEndian.Uint64(prog[i+3:])
			switch prog[i+2] % 6 {
			case 0:
				r.regs.Write8(off, uint8(v))
			case 1:
				r.regs.Write16(off&^1, uint16(v))
			case 2:
				r.regs.Write32(off&^3, uint32(v))
			case 3:
				r.regs.Write64(off&^7, v)
			case 4:
				_ = r.regs.Read64(off &^ 7)
			case 5:
				var b [4]byte
				binary.LittleEndian.PutUint32(b[:], uint32(v))
				_ = r.f.WriteConfig(off&^3, b[:])
			}
		}
		_ = r.p.Close() // must return: no deadlock with a running channel
	})
}
