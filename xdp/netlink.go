package xdp

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// nlMsg is one rtnetlink message: its type and payload.
type nlMsg struct {
	typ  uint16
	data []byte
}

// syscallParseNetlink splits a buffer read from a netlink socket into
// messages, checking every length against the buffer.
func syscallParseNetlink(b []byte) ([]nlMsg, error) {
	var out []nlMsg
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return out, errors.New("netlink: bad message length")
		}
		out = append(out, nlMsg{typ: binary.NativeEndian.Uint16(b[4:6]), data: b[unix.SizeofNlMsghdr:l]})
		l = (l + 3) &^ 3
		if l > len(b) {
			break
		}
		b = b[l:]
	}
	return out, nil
}

// parseNeighbour decodes an RTM_NEWNEIGH payload (struct ndmsg, then
// attributes) into an IPv4 address and a MAC address.
func parseNeighbour(b []byte) (ip [4]byte, mac [6]byte, ok bool) {
	const ndmsgLen = 12
	if len(b) < ndmsgLen || b[0] != unix.AF_INET {
		return ip, mac, false
	}
	state := binary.NativeEndian.Uint16(b[8:10])
	if state&(unix.NUD_INCOMPLETE|unix.NUD_FAILED|unix.NUD_NOARP) != 0 && state&unix.NUD_PERMANENT == 0 {
		return ip, mac, false
	}
	var haveIP, haveMAC bool
	for a := b[ndmsgLen:]; len(a) >= 4; {
		l := int(binary.NativeEndian.Uint16(a[0:2]))
		typ := binary.NativeEndian.Uint16(a[2:4])
		if l < 4 || l > len(a) {
			return ip, mac, false
		}
		v := a[4:l]
		switch {
		case typ == unix.NDA_DST && len(v) == 4:
			copy(ip[:], v)
			haveIP = true
		case typ == unix.NDA_LLADDR && len(v) == 6:
			copy(mac[:], v)
			haveMAC = true
		}
		l = (l + 3) &^ 3
		if l >= len(a) {
			break
		}
		a = a[l:]
	}
	return ip, mac, haveIP && haveMAC
}
