package mx

import (
	"fmt"
	"time"
)

// BoardOptions configures a board and the endpoints opened on it. Zero
// fields take the default shown; start from DefaultBoardOptions to see them.
type BoardOptions struct {
	// RendezvousThreshold is the largest message sent eagerly (tiny, small
	// or medium); longer ones use RNDV + PULL. Default 32 KiB. It is clamped
	// to what 32 medium fragments of the MTU can carry.
	RendezvousThreshold int
	// AckDelay is how long a receiver waits for traffic to piggyback an ack
	// on before sending an explicit one. Default 16 ms (Open-MX: 1/64 s).
	AckDelay time.Duration
	// NotAckedMax is how many received messages make the receiver ack at
	// once. Default 4 (OMX_NOTACKED_MAX).
	NotAckedMax int
	// ResendDelay is the retransmission period of unacked messages and
	// connects. Default 500 ms.
	ResendDelay time.Duration
	// ResendMax is how many resends make a peer unreachable. Default 1000
	// (OMX_RESENDS_MAX): about 500 s with the default delay.
	ResendMax int
	// PullTimeout is the silence after which a puller re-requests every
	// outstanding block. Default 1 s. A pull fails with ErrUnreachable after
	// ResendDelay*ResendMax without progress.
	PullTimeout time.Duration
	// PullBlockFrames is the number of PULL_REPLY frames per block. Default 32.
	PullBlockFrames int
	// PullBlocks is the number of blocks a puller keeps in flight. Default 4.
	PullBlocks int
	// ZombieSends is how many eager sends may complete to the application
	// before they are acked (their data is copied, resends continue in the
	// background). Default 512 (OMX_ZOMBIE_SEND); negative: none, every
	// eager send completes on its ack.
	ZombieSends int
	// MaxUnacked bounds the sequenced messages in flight per partner; more
	// wait in a queue. Default 1024; at most 8191 (half the sequence space).
	MaxUnacked int
	// UnexpectedMaxMessages and UnexpectedMaxBytes bound an endpoint's
	// unexpected queue. When it is full, arriving messages are dropped
	// un-acked (counted as DropUnexpectedFull) and the sender resends them
	// later. Defaults 65536 messages and 64 MiB.
	UnexpectedMaxMessages int
	UnexpectedMaxBytes    int
	// BusyPoll makes waits poll the transport from the waiting goroutine
	// instead of sleeping: lowest latency, one core spinning per waiter.
	BusyPoll bool
	// NoChecksum turns off the CRC-32C frame trailer (see package wire).
	// Both boards must agree. Only safe on wires that check integrity.
	NoChecksum bool
	// Names, when set, receives Hostname for this board on NewBoard and
	// loses it on Close.
	Names *Names
	// Hostname is the name registered in Names, conventionally "host:0".
	Hostname string
	// Local configures the shortcut to endpoints of this process: on by
	// default (see LocalOptions).
	Local LocalOptions
}

// DefaultBoardOptions returns the Open-MX defaults.
func DefaultBoardOptions() BoardOptions {
	return BoardOptions{
		RendezvousThreshold:   32 << 10,
		AckDelay:              16 * time.Millisecond,
		NotAckedMax:           4,
		ResendDelay:           500 * time.Millisecond,
		ResendMax:             1000,
		PullTimeout:           time.Second,
		PullBlockFrames:       32,
		PullBlocks:            4,
		ZombieSends:           512,
		MaxUnacked:            1024,
		UnexpectedMaxMessages: 65536,
		UnexpectedMaxBytes:    64 << 20,
	}
}

// withDefaults fills zero fields and validates the result.
func (o BoardOptions) withDefaults() (BoardOptions, error) {
	d := DefaultBoardOptions()
	if o.RendezvousThreshold == 0 {
		o.RendezvousThreshold = d.RendezvousThreshold
	}
	if o.AckDelay == 0 {
		o.AckDelay = d.AckDelay
	}
	if o.NotAckedMax == 0 {
		o.NotAckedMax = d.NotAckedMax
	}
	if o.ResendDelay == 0 {
		o.ResendDelay = d.ResendDelay
	}
	if o.ResendMax == 0 {
		o.ResendMax = d.ResendMax
	}
	if o.PullTimeout == 0 {
		o.PullTimeout = d.PullTimeout
	}
	if o.PullBlockFrames == 0 {
		o.PullBlockFrames = d.PullBlockFrames
	}
	if o.PullBlocks == 0 {
		o.PullBlocks = d.PullBlocks
	}
	if o.ZombieSends == 0 {
		o.ZombieSends = d.ZombieSends
	}
	if o.ZombieSends < 0 {
		o.ZombieSends = 0
	}
	if o.MaxUnacked == 0 {
		o.MaxUnacked = d.MaxUnacked
	}
	if o.UnexpectedMaxMessages == 0 {
		o.UnexpectedMaxMessages = d.UnexpectedMaxMessages
	}
	if o.UnexpectedMaxBytes == 0 {
		o.UnexpectedMaxBytes = d.UnexpectedMaxBytes
	}
	switch {
	case o.RendezvousThreshold < 128:
		return o, fmt.Errorf("%w: rendezvous threshold %d below the small maximum 128", ErrBadOptions, o.RendezvousThreshold)
	case o.AckDelay < 0 || o.ResendDelay < 0 || o.PullTimeout < 0:
		return o, fmt.Errorf("%w: negative delay", ErrBadOptions)
	case o.NotAckedMax < 1 || o.ResendMax < 1:
		return o, fmt.Errorf("%w: NotAckedMax and ResendMax must be positive", ErrBadOptions)
	case o.PullBlockFrames < 1 || o.PullBlockFrames > 64 || o.PullBlocks < 1 || o.PullBlocks > 16:
		return o, fmt.Errorf("%w: pull blocks: 1..64 frames, 1..16 blocks", ErrBadOptions)
	case o.MaxUnacked < 1 || o.MaxUnacked > 8191:
		return o, fmt.Errorf("%w: MaxUnacked must be in 1..8191", ErrBadOptions)
	case o.UnexpectedMaxMessages < 1 || o.UnexpectedMaxBytes < 1:
		return o, fmt.Errorf("%w: unexpected queue bounds must be positive", ErrBadOptions)
	}
	return o, nil
}
