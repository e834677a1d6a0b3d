package usbnet

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Notification codes a CDC networking function sends on its interrupt
// endpoint (CDC 1.2 §6.3, ECM 1.2 §6.3).
const (
	// NotifyNetworkConnection: wValue 1 when the link is up, 0 when down.
	NotifyNetworkConnection = 0x00
	// NotifyResponseAvailable: an encapsulated response is waiting.
	NotifyResponseAvailable = 0x01
	// NotifyConnectionSpeedChange: 8 bytes of data, the downstream and
	// upstream bit rates in bits per second.
	NotifyConnectionSpeedChange = 0x2A
)

// notifyRequestType is bmRequestType of every notification: device to
// host, class, interface.
const notifyRequestType = 0xA1

// ErrBadNotification means an interrupt transfer does not hold well-formed
// notifications.
var ErrBadNotification = errors.New("malformed CDC notification")

// Notification is one decoded notification.
type Notification struct {
	// Code is bNotificationCode.
	Code uint8
	// Value and Interface are wValue and wIndex.
	Value, Interface uint16
	// Down and Up are the bit rates of a CONNECTION_SPEED_CHANGE (DLBitRate
	// and ULBitRate), 0 otherwise.
	Down, Up uint32
}

// Connected reports, for a NETWORK_CONNECTION, whether the link is up.
func (n Notification) Connected() bool { return n.Value != 0 }

// String describes the notification.
func (n Notification) String() string {
	switch n.Code {
	case NotifyNetworkConnection:
		if n.Connected() {
			return "network connected"
		}
		return "network disconnected"
	case NotifyConnectionSpeedChange:
		return fmt.Sprintf("speed %d/%d bit/s", n.Down, n.Up)
	}
	return fmt.Sprintf("notification %#02x", n.Code)
}

// ParseNotifications decodes the notifications of one interrupt transfer
// (usually one; some devices send a speed change and a connection in one
// transfer) and appends them to out. Each is an 8-byte setup-like header
// (bmRequestType 0xA1, bNotificationCode, wValue, wIndex, wLength) followed
// by wLength bytes. A header that is short, of another request type, or
// whose wLength runs past the transfer fails with ErrBadNotification, as
// does a CONNECTION_SPEED_CHANGE whose data is not 8 bytes; out comes back
// as it was given.
func ParseNotifications(b []byte, out []Notification) ([]Notification, error) {
	start := len(out)
	for off := 0; off < len(b); {
		r := b[off:]
		if len(r) < 8 {
			return out[:start], fmt.Errorf("notification at %d: %d bytes, want an 8-byte header: %w", off, len(r), ErrBadNotification)
		}
		if r[0] != notifyRequestType {
			return out[:start], fmt.Errorf("notification at %d: bmRequestType %#02x, want 0xa1: %w", off, r[0], ErrBadNotification)
		}
		n := Notification{Code: r[1], Value: binary.LittleEndian.Uint16(r[2:]), Interface: binary.LittleEndian.Uint16(r[4:])}
		l := int(binary.LittleEndian.Uint16(r[6:]))
		if 8+l > len(r) {
			return out[:start], fmt.Errorf("notification %#02x at %d: wLength %d with %d bytes left: %w", n.Code, off, l, len(r)-8, ErrBadNotification)
		}
		if n.Code == NotifyConnectionSpeedChange {
			if l != 8 {
				return out[:start], fmt.Errorf("CONNECTION_SPEED_CHANGE at %d: wLength %d, want 8: %w", off, l, ErrBadNotification)
			}
			n.Down = binary.LittleEndian.Uint32(r[8:])
			n.Up = binary.LittleEndian.Uint32(r[12:])
		}
		out = append(out, n)
		off += 8 + l
	}
	return out, nil
}

// AppendNotification encodes a notification (for devices and tests): the
// 8-byte header and, for a speed change, its 8 bytes of rates.
func AppendNotification(b []byte, n Notification) []byte {
	l := 0
	if n.Code == NotifyConnectionSpeedChange {
		l = 8
	}
	b = append(b, notifyRequestType, n.Code)
	b = binary.LittleEndian.AppendUint16(b, n.Value)
	b = binary.LittleEndian.AppendUint16(b, n.Interface)
	b = binary.LittleEndian.AppendUint16(b, uint16(l))
	if l == 8 {
		b = binary.LittleEndian.AppendUint32(b, n.Down)
		b = binary.LittleEndian.AppendUint32(b, n.Up)
	}
	return b
}
