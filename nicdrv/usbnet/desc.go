package usbnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"

	"github.com/gomx-dev/gomx/nicdrv"
)

// Standard descriptor types (USB 2.0 §9.4, table 9-5) and the class-specific
// interface type of the CDC specifications.
const (
	descDevice      = 0x01
	descConfig      = 0x02
	descString      = 0x03
	descInterface   = 0x04
	descEndpoint    = 0x05
	descCSInterface = 0x24
)

// Interface classes and subclasses of CDC 1.2.
const (
	classComm     = 0x02 // Communications Interface Class
	classData     = 0x0A // Data Interface Class
	subclassECM   = 0x06 // Ethernet Networking Control Model
	subclassNCM   = 0x0D // Network Control Model
	funcHeader    = 0x00 // Header Functional Descriptor
	funcUnion     = 0x06 // Union Functional Descriptor
	funcEthernet  = 0x0F // Ethernet Networking Functional Descriptor
	funcNCM       = 0x1A // NCM Functional Descriptor
	transferBulk  = 0x02 // bmAttributes transfer type: bulk
	transferIntr  = 0x03 // bmAttributes transfer type: interrupt
	endpointIn    = 0x80 // bEndpointAddress direction bit
	maxPacketMask = 0x07FF
)

// Model is the CDC networking model of a function.
type Model int

// The two CDC models the driver speaks.
const (
	// ECM is the Ethernet Control Model: one Ethernet frame per bulk
	// transfer.
	ECM Model = iota + 1
	// NCM is the Network Control Model: NTB16 transfer blocks carrying
	// several frames each.
	NCM
)

// String names the model ("ECM", "NCM").
func (m Model) String() string {
	switch m {
	case ECM:
		return "ECM"
	case NCM:
		return "NCM"
	}
	return fmt.Sprintf("Model(%d)", int(m))
}

// ErrNotCDC means the device offers no CDC ECM or NCM function.
var ErrNotCDC = errors.New("no CDC Ethernet (ECM or NCM) function")

// ErrBadDescriptor means a descriptor the device returned is malformed: a
// length that runs past its container, a count that does not match what
// follows, a missing mandatory functional descriptor.
var ErrBadDescriptor = errors.New("malformed USB descriptor")

// DeviceDescriptor is the part of the standard device descriptor the driver
// uses.
type DeviceDescriptor struct {
	// Class, SubClass, Protocol are bDeviceClass, bDeviceSubClass and
	// bDeviceProtocol.
	Class, SubClass, Protocol uint8
	// MaxPacket0 is the control endpoint's bMaxPacketSize0.
	MaxPacket0 int
	// Vendor and Product are idVendor and idProduct.
	Vendor, Product uint16
	// Configs is bNumConfigurations.
	Configs int
}

// ParseDeviceDescriptor decodes an 18-byte device descriptor.
func ParseDeviceDescriptor(b []byte) (DeviceDescriptor, error) {
	var d DeviceDescriptor
	if len(b) < 18 || b[0] < 18 || b[1] != descDevice {
		return d, fmt.Errorf("device descriptor of %d bytes (bLength %d, type %#x): want 18 bytes of type 1: %w", len(b), first(b, 0), first(b, 1), ErrBadDescriptor)
	}
	d.Class, d.SubClass, d.Protocol = b[4], b[5], b[6]
	d.MaxPacket0 = int(b[7])
	d.Vendor = binary.LittleEndian.Uint16(b[8:])
	d.Product = binary.LittleEndian.Uint16(b[10:])
	d.Configs = int(b[17])
	return d, nil
}

func first(b []byte, i int) int {
	if i < len(b) {
		return int(b[i])
	}
	return -1
}

// ConfigTotalLength reads wTotalLength from the first 9 bytes of a
// configuration descriptor: how many bytes to fetch for the whole set.
func ConfigTotalLength(b []byte) (int, error) {
	if len(b) < 9 || b[0] < 9 || b[1] != descConfig {
		return 0, fmt.Errorf("configuration descriptor header of %d bytes (bLength %d, type %#x): %w", len(b), first(b, 0), first(b, 1), ErrBadDescriptor)
	}
	n := int(binary.LittleEndian.Uint16(b[2:]))
	if n < 9 {
		return 0, fmt.Errorf("configuration wTotalLength %d, shorter than its own 9-byte header: %w", n, ErrBadDescriptor)
	}
	return n, nil
}

// Endpoint is one endpoint of an interface's alternate setting.
type Endpoint struct {
	// Address is bEndpointAddress (bit 7 set for IN).
	Address uint8
	// MaxPacket is wMaxPacketSize's packet size (bits 10:0).
	MaxPacket int
}

// Function is a CDC networking function found in a configuration: which
// interfaces and endpoints carry it and what its functional descriptors
// say.
type Function struct {
	// Model is ECM or NCM.
	Model Model
	// Config is the configuration's bConfigurationValue.
	Config int
	// Control and Data are the interface numbers of the communications
	// interface and of the data interface the union names.
	Control, Data int
	// DataAlt is the data interface's alternate setting that has the bulk
	// endpoints (1 on conforming devices; its setting 0 has none).
	DataAlt int
	// BulkIn and BulkOut are the data endpoints of setting DataAlt.
	BulkIn, BulkOut Endpoint
	// Notify is the communications interface's interrupt IN endpoint;
	// Address 0 when the device has none.
	Notify Endpoint
	// MACString is iMACAddress: the index of the string descriptor that
	// holds the MAC as 12 hex digits.
	MACString int
	// Statistics is bmEthernetStatistics: which GET_ETHERNET_STATISTIC
	// selectors the device counts (bit n for selector n+1).
	Statistics uint32
	// MaxSegment is wMaxSegmentSize: the largest frame, header included,
	// without FCS.
	MaxSegment int
	// MulticastFilters is the number of multicast addresses the device
	// filters on (wNumberMCFilters bits 14:0); MulticastImperfect is its
	// bit 15 (hash filtering: some other groups pass too).
	MulticastFilters   int
	MulticastImperfect bool
	// CDCVersion is the header functional descriptor's bcdCDC.
	CDCVersion uint16
	// NCMVersion and NCMCapabilities are the NCM functional descriptor's
	// bcdNcmVersion and bmNetworkCapabilities (0 for ECM).
	NCMVersion      uint16
	NCMCapabilities uint8
}

// NCM bmNetworkCapabilities bits.
const (
	// NCMCapPacketFilter: SetEthernetPacketFilter is supported.
	NCMCapPacketFilter = 1 << 0
	// NCMCapNetAddress: Get/SetNetAddress are supported.
	NCMCapNetAddress = 1 << 1
	// NCMCapMaxDatagram: Get/SetMaxDatagramSize are supported.
	NCMCapMaxDatagram = 1 << 3
)

// String describes the function as "CDC ECM config 1, interfaces 0+1 (alt 1), bulk 0x81/0x02, notify 0x83".
func (f Function) String() string {
	return fmt.Sprintf("CDC %v config %d, interfaces %d+%d (alt %d), bulk %#02x/%#02x, notify %#02x",
		f.Model, f.Config, f.Control, f.Data, f.DataAlt, f.BulkIn.Address, f.BulkOut.Address, f.Notify.Address)
}

// ifaceInfo is what the parser keeps of one interface alternate setting.
type ifaceInfo struct {
	num, alt                 int
	class, subclass, proto   uint8
	wantEndpoints            int
	endpoints                []epInfo
	header, union, eth, ncmf []byte // functional descriptors (control interfaces)
}

type epInfo struct {
	addr, attr uint8
	maxPacket  int
}

// ParseConfig decodes a whole configuration descriptor set (the
// configuration descriptor and the wTotalLength bytes that follow it) and
// returns the CDC ECM and NCM functions it holds, in interface order. A set
// that lies about its lengths (a descriptor running past the end, a
// wTotalLength other than the bytes given, bNumEndpoints other than the
// endpoint descriptors that follow) fails with ErrBadDescriptor; so does a
// CDC networking interface without its header, union or Ethernet
// functional descriptor, or whose union names a data interface without
// bulk endpoints. A valid set without any CDC networking interface returns
// no functions and no error.
func ParseConfig(b []byte) ([]Function, error) {
	total, err := ConfigTotalLength(b)
	if err != nil {
		return nil, err
	}
	if total != len(b) {
		return nil, fmt.Errorf("configuration wTotalLength %d but %d bytes returned: %w", total, len(b), ErrBadDescriptor)
	}
	if int(b[0]) > len(b) {
		return nil, fmt.Errorf("configuration descriptor bLength %d runs past the %d bytes of the set: %w", b[0], len(b), ErrBadDescriptor)
	}
	cfgValue := int(b[5])
	numIfaces := int(b[4])
	var ifs []*ifaceInfo
	var cur *ifaceInfo
	closeIface := func() error {
		if cur != nil && len(cur.endpoints) != cur.wantEndpoints {
			return fmt.Errorf("interface %d alt %d: bNumEndpoints %d but %d endpoint descriptors follow: %w",
				cur.num, cur.alt, cur.wantEndpoints, len(cur.endpoints), ErrBadDescriptor)
		}
		return nil
	}
	for off := int(b[0]); off < len(b); {
		rest := b[off:]
		if len(rest) < 2 {
			return nil, fmt.Errorf("descriptor at offset %d: 1 byte left, a descriptor needs 2: %w", off, ErrBadDescriptor)
		}
		l, typ := int(rest[0]), rest[1]
		if l < 2 || l > len(rest) {
			return nil, fmt.Errorf("descriptor type %#x at offset %d: bLength %d with %d bytes left: %w", typ, off, l, len(rest), ErrBadDescriptor)
		}
		d := rest[:l]
		switch typ {
		case descInterface:
			if l < 9 {
				return nil, fmt.Errorf("interface descriptor at offset %d: bLength %d, want 9: %w", off, l, ErrBadDescriptor)
			}
			if err := closeIface(); err != nil {
				return nil, err
			}
			cur = &ifaceInfo{num: int(d[2]), alt: int(d[3]), wantEndpoints: int(d[4]), class: d[5], subclass: d[6], proto: d[7]}
			ifs = append(ifs, cur)
		case descEndpoint:
			if l < 7 {
				return nil, fmt.Errorf("endpoint descriptor at offset %d: bLength %d, want 7: %w", off, l, ErrBadDescriptor)
			}
			if cur == nil {
				return nil, fmt.Errorf("endpoint descriptor at offset %d before any interface: %w", off, ErrBadDescriptor)
			}
			cur.endpoints = append(cur.endpoints, epInfo{addr: d[2], attr: d[3], maxPacket: int(binary.LittleEndian.Uint16(d[4:]) & maxPacketMask)})
		case descCSInterface:
			if cur == nil || l < 3 {
				break // not ours to judge: a class descriptor outside an interface
			}
			switch d[2] {
			case funcHeader:
				cur.header = d
			case funcUnion:
				cur.union = d
			case funcEthernet:
				cur.eth = d
			case funcNCM:
				cur.ncmf = d
			}
		case descConfig, descDevice:
			return nil, fmt.Errorf("descriptor type %#x at offset %d inside a configuration: %w", typ, off, ErrBadDescriptor)
		}
		off += l
	}
	if err := closeIface(); err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	for _, i := range ifs {
		seen[i.num] = true
	}
	if len(seen) != numIfaces {
		return nil, fmt.Errorf("configuration %d: bNumInterfaces %d but %d interfaces described: %w", cfgValue, numIfaces, len(seen), ErrBadDescriptor)
	}
	var fns []Function
	for _, c := range ifs {
		if c.class != classComm || c.alt != 0 || (c.subclass != subclassECM && c.subclass != subclassNCM) {
			continue
		}
		f, err := function(cfgValue, c, ifs)
		if err != nil {
			return nil, err
		}
		fns = append(fns, f)
	}
	return fns, nil
}

// function completes the Function of communications interface c.
func function(cfg int, c *ifaceInfo, ifs []*ifaceInfo) (Function, error) {
	f := Function{Model: ECM, Config: cfg, Control: c.num}
	if c.subclass == subclassNCM {
		f.Model = NCM
	}
	where := fmt.Sprintf("CDC %v interface %d", f.Model, c.num)
	if len(c.header) < 5 {
		return f, fmt.Errorf("%s: no header functional descriptor (5 bytes): %w", where, ErrBadDescriptor)
	}
	f.CDCVersion = binary.LittleEndian.Uint16(c.header[3:])
	if len(c.union) < 5 {
		return f, fmt.Errorf("%s: no union functional descriptor (at least 5 bytes): %w", where, ErrBadDescriptor)
	}
	if int(c.union[3]) != c.num {
		return f, fmt.Errorf("%s: union names interface %d as the control interface: %w", where, c.union[3], ErrBadDescriptor)
	}
	f.Data = int(c.union[4])
	if len(c.eth) < 13 {
		return f, fmt.Errorf("%s: no Ethernet networking functional descriptor (13 bytes): %w", where, ErrBadDescriptor)
	}
	f.MACString = int(c.eth[3])
	f.Statistics = binary.LittleEndian.Uint32(c.eth[4:])
	f.MaxSegment = int(binary.LittleEndian.Uint16(c.eth[8:]))
	mc := binary.LittleEndian.Uint16(c.eth[10:])
	f.MulticastFilters, f.MulticastImperfect = int(mc&0x7FFF), mc&0x8000 != 0
	if f.MACString == 0 {
		return f, fmt.Errorf("%s: iMACAddress is 0 (no MAC string): %w", where, ErrBadDescriptor)
	}
	if f.MaxSegment < 14 {
		return f, fmt.Errorf("%s: wMaxSegmentSize %d is shorter than an Ethernet header: %w", where, f.MaxSegment, ErrBadDescriptor)
	}
	if f.Model == NCM {
		if len(c.ncmf) < 6 {
			return f, fmt.Errorf("%s: no NCM functional descriptor (6 bytes): %w", where, ErrBadDescriptor)
		}
		f.NCMVersion = binary.LittleEndian.Uint16(c.ncmf[3:])
		f.NCMCapabilities = c.ncmf[5]
	}
	for _, e := range c.endpoints {
		if e.attr&3 == transferIntr && e.addr&endpointIn != 0 {
			f.Notify = Endpoint{Address: e.addr, MaxPacket: e.maxPacket}
			break
		}
	}
	found := false
	for _, d := range ifs {
		if d.num != f.Data {
			continue
		}
		found = true
		if d.class != classData {
			return f, fmt.Errorf("%s: union names interface %d, of class %#02x, not a data interface (0x0a): %w", where, d.num, d.class, ErrBadDescriptor)
		}
		var in, out *epInfo
		for k := range d.endpoints {
			e := &d.endpoints[k]
			if e.attr&3 != transferBulk {
				continue
			}
			if e.addr&endpointIn != 0 && in == nil {
				in = e
			} else if e.addr&endpointIn == 0 && out == nil {
				out = e
			}
		}
		if in != nil && out != nil {
			if in.maxPacket == 0 || out.maxPacket == 0 {
				return f, fmt.Errorf("%s: data interface %d alt %d has a bulk endpoint of max packet size 0: %w", where, d.num, d.alt, ErrBadDescriptor)
			}
			f.DataAlt = d.alt
			f.BulkIn = Endpoint{Address: in.addr, MaxPacket: in.maxPacket}
			f.BulkOut = Endpoint{Address: out.addr, MaxPacket: out.maxPacket}
			return f, nil
		}
	}
	if !found {
		return f, fmt.Errorf("%s: union names data interface %d, which the configuration does not describe: %w", where, f.Data, ErrBadDescriptor)
	}
	return f, fmt.Errorf("%s: data interface %d has no alternate setting with a bulk IN and a bulk OUT endpoint: %w", where, f.Data, ErrBadDescriptor)
}

// ParseString decodes a string descriptor (UTF-16LE after a 2-byte header).
func ParseString(b []byte) (string, error) {
	if len(b) < 2 || b[1] != descString || int(b[0]) > len(b) || b[0] < 2 || b[0]%2 != 0 {
		return "", fmt.Errorf("string descriptor of %d bytes (bLength %d, type %#x): %w", len(b), first(b, 0), first(b, 1), ErrBadDescriptor)
	}
	u := make([]uint16, 0, (int(b[0])-2)/2)
	for i := 2; i+1 < int(b[0]); i += 2 {
		u = append(u, binary.LittleEndian.Uint16(b[i:]))
	}
	return string(utf16.Decode(u)), nil
}

// ParseMAC reads the iMACAddress string: 12 hexadecimal digits, the first
// byte's first (CDC ECM 1.2 §5.4).
func ParseMAC(s string) (nicdrv.MAC, error) {
	var m nicdrv.MAC
	if len(s) != 12 {
		return m, fmt.Errorf("MAC string %q: want 12 hex digits: %w", s, ErrBadDescriptor)
	}
	for i := range 6 {
		hi, ok1 := hexDigit(s[2*i])
		lo, ok2 := hexDigit(s[2*i+1])
		if !ok1 || !ok2 {
			return m, fmt.Errorf("MAC string %q: %q is not hex: %w", s, s[2*i:2*i+2], ErrBadDescriptor)
		}
		m[i] = hi<<4 | lo
	}
	if m == (nicdrv.MAC{}) || m.IsMulticast() {
		return m, fmt.Errorf("MAC string %q is not a unicast address: %w", s, ErrBadDescriptor)
	}
	return m, nil
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// describeInterfaces lists a configuration's interfaces as
// "class/subclass/protocol" triples, for the error that says a device has
// no CDC function.
func describeInterfaces(b []byte) string {
	var out []string
	for off := 0; off+2 <= len(b) && b[off] >= 2; off += int(b[off]) {
		if b[off+1] == descInterface && off+9 <= len(b) && b[off+3] == 0 {
			out = append(out, fmt.Sprintf("%02x/%02x/%02x", b[off+5], b[off+6], b[off+7]))
		}
	}
	return strings.Join(out, " ")
}
