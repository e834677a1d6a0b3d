package main

import "github.com/gomx-dev/gomx/mx"

// copies is what the CPU copied of the payload on each side during one
// size (mx.CopyStats): side a starts each exchange (pingpong's pinger,
// stream's sender), side b answers it.
type copies struct {
	A copySide `json:"a"`
	B copySide `json:"b"`
}

// copySide is one endpoint's copy accounting: bytes the CPU copied per
// payload byte it sent and received, and the counts they come from.
type copySide struct {
	SendPerByte   float64 `json:"send_per_byte"`
	RecvPerByte   float64 `json:"recv_per_byte"`
	SentBytes     uint64  `json:"sent_bytes"`
	SendGather    uint64  `json:"send_gather"`
	SendTransport uint64  `json:"send_transport"`
	SendInPlace   uint64  `json:"send_in_place"`
	RecvBytes     uint64  `json:"recv_bytes"`
	RecvScatter   uint64  `json:"recv_scatter"`
	RecvEngine    uint64  `json:"recv_engine"`
	RecvPlaced    uint64  `json:"recv_placed"`
}

func sideOf(c mx.CopyStats) copySide {
	return copySide{
		SendPerByte: c.SendPerByte(), RecvPerByte: c.RecvPerByte(),
		SentBytes: c.SentBytes, SendGather: c.SendGather, SendTransport: c.SendTransport,
		SendInPlace: c.SendInPlace, RecvBytes: c.RecvBytes, RecvScatter: c.RecvScatter,
		RecvEngine: c.RecvEngine, RecvPlaced: c.RecvPlaced,
	}
}

// copiesBetween is what each side counted between two snapshots.
func copiesBetween(before, after [2]mx.CopyStats) *copies {
	return &copies{A: sideOf(after[0].Sub(before[0])), B: sideOf(after[1].Sub(before[1]))}
}
