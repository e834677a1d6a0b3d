package wire

// The headers of host discovery: HOST_QUERY asks a board for its hostname
// and HOST_REPLY carries it. The conventions of Put and Decode are those of
// headers.go.

// HostQuery is the 16-byte HOST_QUERY a board sends to learn a peer's
// hostname (struct omx_pkt_host_query).
//
//	0 type | 1 pad | 2 the receiver's index in the sender's peer table (2)
//	4 pad (4) | 8 magic (4) | 12 pad (4)
type HostQuery struct {
	YourIndex uint16
	Magic     uint32
}

// Put writes the header.
func (h *HostQuery) Put(p []byte, o Order) {
	_ = p[HostQueryLen-1]
	p[0], p[1] = byte(TypeHostQuery), 0
	o.put16(p[2:], h.YourIndex)
	o.put32(p[4:], 0)
	o.put32(p[8:], h.Magic)
	o.put32(p[12:], 0)
}

// DecodeHostQuery decodes a HOST_QUERY.
func DecodeHostQuery(p []byte, o Order) (HostQuery, error) {
	var h HostQuery
	if err := checkType(p, TypeHostQuery, HostQueryLen); err != nil {
		return h, err
	}
	h.YourIndex = o.u16(p[2:])
	h.Magic = o.u32(p[8:])
	return h, nil
}

// HostReply is the HOST_REPLY answering a HOST_QUERY (struct
// omx_pkt_host_reply): a 16-byte header, then the hostname and a NUL.
//
//	0 type | 1 hostname length, NUL included | 2 the receiver's index in the
//	sender's peer table (2) | 4 pad (4) | 8 magic echoed from the query (4) | 12 pad (4)
type HostReply struct {
	YourIndex uint16
	Magic     uint32
	Hostname  string // without the NUL; at most MaxHostname bytes
}

// MaxHostname is the longest hostname a HOST_REPLY carries (its length byte
// counts the NUL).
const MaxHostname = 254

// Len returns the encoded length.
func (h *HostReply) Len() int { return HostReplyLen + len(h.Hostname) + 1 }

// Put writes the header and the hostname; a hostname longer than
// MaxHostname is cut.
func (h *HostReply) Put(p []byte, o Order) {
	name := h.Hostname
	if len(name) > MaxHostname {
		name = name[:MaxHostname]
	}
	_ = p[HostReplyLen+len(name)]
	p[0], p[1] = byte(TypeHostReply), byte(len(name)+1)
	o.put16(p[2:], h.YourIndex)
	o.put32(p[4:], 0)
	o.put32(p[8:], h.Magic)
	o.put32(p[12:], 0)
	copy(p[HostReplyLen:], name)
	p[HostReplyLen+len(name)] = 0
}

// DecodeHostReply decodes a HOST_REPLY. Like Open-MX it takes the hostname
// up to the first NUL within the stated length.
func DecodeHostReply(p []byte, o Order) (HostReply, error) {
	var h HostReply
	if err := checkType(p, TypeHostReply, HostReplyLen); err != nil {
		return h, err
	}
	n := int(p[1])
	if n == 0 {
		return h, derr(TypeHostReply, "length", ErrBadLength)
	}
	if len(p) < HostReplyLen+n {
		return h, derr(TypeHostReply, "hostname", ErrShort)
	}
	h.YourIndex = o.u16(p[2:])
	h.Magic = o.u32(p[8:])
	name := p[HostReplyLen : HostReplyLen+n-1]
	for i, c := range name {
		if c == 0 {
			name = name[:i]
			break
		}
	}
	h.Hostname = string(name)
	return h, nil
}
