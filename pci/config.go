package pci

import "encoding/binary"

// Standard configuration-space offsets (PCI Local Bus spec, type 0 header).
const (
	ConfigVendorID    = 0x00
	ConfigDeviceID    = 0x02
	ConfigCommand     = 0x04
	ConfigStatus      = 0x06
	ConfigRevision    = 0x08
	ConfigClass       = 0x09 // 3 bytes: prog-if, subclass, class
	ConfigHeaderType  = 0x0E
	ConfigBAR0        = 0x10
	ConfigSubVendorID = 0x2C
	ConfigSubDeviceID = 0x2E
	ConfigCapPtr      = 0x34
	ConfigIntLine     = 0x3C
)

// Bits of the command register.
const (
	CommandIO          = 1 << 0
	CommandMemory      = 1 << 1
	CommandBusMaster   = 1 << 2
	CommandINTxDisable = 1 << 10
)

// Capability IDs found on the capability list.
const (
	CapPM         = 0x01
	CapMSI        = 0x05
	CapPCIe       = 0x10
	CapMSIX       = 0x11
	StatusCapList = 1 << 4
)

// ReadConfig8 reads one byte of configuration space.
func ReadConfig8(d Device, off int) (uint8, error) {
	var b [1]byte
	err := d.ReadConfig(off, b[:])
	return b[0], err
}

// ReadConfig16 reads a little-endian 16-bit configuration register.
func ReadConfig16(d Device, off int) (uint16, error) {
	var b [2]byte
	err := d.ReadConfig(off, b[:])
	return binary.LittleEndian.Uint16(b[:]), err
}

// ReadConfig32 reads a little-endian 32-bit configuration register.
func ReadConfig32(d Device, off int) (uint32, error) {
	var b [4]byte
	err := d.ReadConfig(off, b[:])
	return binary.LittleEndian.Uint32(b[:]), err
}

// WriteConfig8 writes one byte of configuration space.
func WriteConfig8(d Device, off int, v uint8) error {
	return d.WriteConfig(off, []byte{v})
}

// WriteConfig16 writes a little-endian 16-bit configuration register.
func WriteConfig16(d Device, off int, v uint16) error {
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	return d.WriteConfig(off, b[:])
}

// WriteConfig32 writes a little-endian 32-bit configuration register.
func WriteConfig32(d Device, off int, v uint32) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return d.WriteConfig(off, b[:])
}

// ID is what identifies a function's model: vendor, device and class.
type ID struct {
	Vendor   uint16
	Device   uint16
	Class    uint32 // class code, prog-if in the low byte
	Revision uint8
}

// ReadID reads the identification registers of the function.
func ReadID(d Device) (ID, error) {
	var b [12]byte
	if err := d.ReadConfig(0, b[:]); err != nil {
		return ID{}, err
	}
	return ID{
		Vendor:   binary.LittleEndian.Uint16(b[0:]),
		Device:   binary.LittleEndian.Uint16(b[2:]),
		Revision: b[8],
		Class:    uint32(b[9]) | uint32(b[10])<<8 | uint32(b[11])<<16,
	}, nil
}

// SetCommand sets bits in the command register, for example
// CommandMemory|CommandBusMaster before a driver starts DMA.
func SetCommand(d Device, set uint16) error {
	v, err := ReadConfig16(d, ConfigCommand)
	if err != nil {
		return err
	}
	return WriteConfig16(d, ConfigCommand, v|set)
}

// ClearCommand clears bits in the command register, for example
// CommandBusMaster when a driver stops.
func ClearCommand(d Device, clear uint16) error {
	v, err := ReadConfig16(d, ConfigCommand)
	if err != nil {
		return err
	}
	return WriteConfig16(d, ConfigCommand, v&^clear)
}

// FindCapability walks the capability list and returns the offset of the
// first capability with the given ID, or 0 when there is none.
func FindCapability(d Device, id uint8) (int, error) {
	st, err := ReadConfig16(d, ConfigStatus)
	if err != nil {
		return 0, err
	}
	if st&StatusCapList == 0 {
		return 0, nil
	}
	p, err := ReadConfig8(d, ConfigCapPtr)
	if err != nil {
		return 0, err
	}
	for i := 0; p != 0 && i < 48; i++ { // 48 capabilities at most fit in 256 bytes
		p &^= 3
		capID, err := ReadConfig8(d, int(p))
		if err != nil {
			return 0, err
		}
		if capID == id {
			return int(p), nil
		}
		if p, err = ReadConfig8(d, int(p)+1); err != nil {
			return 0, err
		}
	}
	return 0, nil
}
