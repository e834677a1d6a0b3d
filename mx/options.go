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
	// ResendDelay is the retransmission period of connects, and of
	// unacked messages to a partner whose round trip is not measured yet
	// (then the RTO, RTOMin..RTOMax, applies); for a gomx peer that takes
	// questions it is instead the wait before the first question.
	// Default 500 ms.
	ResendDelay time.Duration
	// ResendMax is how many resends make a peer unreachable. Default 1000
	// (OMX_RESENDS_MAX): about 500 s with the default delay, counted on
	// the board's running time (a stall of the board's own process does
	// not count, liveness.go).
	ResendMax int
	// PullTimeout is the silence after which a puller re-requests its
	// oldest unfinished block while the pull path's round trip is not
	// measured yet (then the RTO applies). Default 1 s. A pull fails with
	// ErrUnreachable after ResendDelay*ResendMax without progress.
	PullTimeout time.Duration
	// RTOMin and RTOMax bound the retransmission timeout that resends and
	// pull re-requests use once a partner's round trip has been measured
	// (srtt + 4*rttvar, RFC 6298; see rtt.go): RTOMin keeps a fast, steady
	// wire from resending on scheduling noise, RTOMax caps exponential
	// backoff. The tail-loss probe waits twice the smoothed round trip,
	// or srtt + 4*rttvar, at least srtt + RTOMin/4 (the receiver's delay
	// of a tail's ack). Both allow for a peer the
	// machine keeps descheduled, as their polling waiters measure it
	// (descheduled.go). Defaults 250 us and ResendDelay. Before the first
	// measurement ResendDelay and PullTimeout apply as they are.
	RTOMin, RTOMax time.Duration
	// PullEngineMin and PullEngineFrag are the smallest message and pull
	// reply fragment whose copy into the receive buffer goes to the copy
	// engine (Local.Engine) when there is one (pulloffload.go). Defaults
	// DefaultPullEngineMin (2 MiB) and DefaultPullEngineFrag (1 KiB);
	// GOMX_PULL_ENGINE_MIN and GOMX_PULL_ENGINE_FRAG set them.
	PullEngineMin, PullEngineFrag int
	// PullBlockFrames is the number of PULL_REPLY frames per block. Default 32.
	PullBlockFrames int
	// PullBlocks is the number of blocks a puller keeps in flight. Default 4.
	PullBlocks int
	// ZombieSends is how many eager sends may complete to the application
	// before they are acked (their data is copied, resends continue in the
	// background). Default 512 (OMX_ZOMBIE_SEND); negative: none, every
	// eager send completes on its ack, and eager sends of one frame to peers on
	// shared-memory rings too (they skip the lean path, see lean.go).
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
	// Spin is how long a waiting goroutine polls shared-memory rings (a
	// shm board, or the host path), an AF_XDP socket and a NIC queue's RX
	// ring (a queued board's; any transport.Spinner) itself before it
	// sleeps, at first: a
	// message found meanwhile completes its request with no futex and no
	// goroutine hand-off (see poll.go). Each endpoint then tunes its own
	// window between 0 and SpinMax (on an oversubscribed node, SpinMax
	// stretched by the processes each CPU has: see SpinMax) from how its
	// waits end
	// (Endpoint.SpinWindow), and Spin is where it starts and how far it
	// jumps when it grows from 0. Default $GOMX_SPIN (a Go duration),
	// else DefaultSpin; negative (or GOMX_SPIN=0): never spin.
	Spin time.Duration
	// SpinMax caps the poll window: a wait whose message comes within
	// SpinMax of its start grows its endpoint's window so the next such
	// message is caught by polling; one that comes later shrinks it. On a
	// node the board finds oversubscribed (see Yield) the cap is SpinMax
	// times the processes each CPU has, up to 16 ms (or SpinMax, if
	// larger), and a waiter whose messages come soon polls for SpinMax at
	// least. Default $GOMX_SPIN_MAX, else DefaultSpinMax (or Spin, if
	// larger).
	SpinMax time.Duration
	// SleepOnSources makes a blocking waiter whose poll window is spent
	// take the board's sources and sleep in the kernel on them itself, on
	// its own thread, receiving its message there, instead of sleeping
	// until the receive loop completes its request (see sleep.go). It
	// pays where the waiter is a thread the Go scheduler cannot hand the
	// completion to at no cost: a C thread waiting in libmyriexpress,
	// which sets it. Default: $GOMX_SLEEP (recv sets it, loop clears it).
	SleepOnSources bool
	// Yield says when waiters give their CPU away with sched_yield from
	// their first empty look instead of spinning first, and poll so, a
	// blocking waiter for at least SpinMax (its window, which may grow up
	// to SpinMax times the processes a CPU has: stretchSpin) while its
	// endpoint's window is at Spin or above (else it sleeps at once),
	// before they sleep: on a node
	// with more processes than CPUs, the process a waiter waits for
	// usually needs the waiter's CPU (see oversub.go). YieldAuto, the
	// default, does so when the processes the board shares rings with
	// that are awake (not blocked in a wait), itself among them,
	// outnumber the CPUs they may run on; YieldAlways
	// and YieldNever whatever the count. Default: $GOMX_YIELD (auto,
	// always or never).
	Yield YieldPolicy
	// NoChecksum turns off the CRC-32C frame trailer (see package wire).
	// The trailer is a gomx extension negotiated at connect: frames between
	// two boards carry it when both announce it (neither set NoChecksum),
	// and never with an Open-MX peer, which does not announce it. Only turn
	// it off on wires that check integrity.
	NoChecksum bool
	// ZeroCopy configures sending large messages from the application's
	// memory over transports that send in place (docs/zero-copy.md).
	ZeroCopy ZeroCopyOptions
	// NoSack turns off the selective ack (see package wire): between two
	// gomx boards it is on when both announce it (neither set NoSack);
	// an Open-MX peer never uses it.
	NoSack bool
	// LittleEndian selects little-endian header integers, for Open-MX peers
	// built with --disable-endian on little-endian hosts; Open-MX's default
	// and gomx's is big-endian. Every board on a wire must agree.
	LittleEndian bool
	// OpenMXMTU is the MTU Open-MX peers were built with (configure
	// --with-mtu, Ethernet header included): it fixes their medium fragment
	// stride and pull reply length, which their frames do not carry.
	// Default 9000 (8192-byte fragments, 8968-byte pull replies); it is
	// capped by the transport's MTU.
	OpenMXMTU int
	// PullHandles bounds the pulls an endpoint runs at once (Open-MX's
	// pull handles); further matched large receives wait in a queue for
	// one. Default 1024, at most 1024.
	PullHandles int
	// PullFrames bounds the PULL_REPLY frames the board's pulls over its
	// transport may have asked for at once: each pull asks for up to
	// PullBlocks × PullBlockFrames, so PullFrames over that many pulls
	// run at once on the board (one at least) and further matched large
	// receives wait in their endpoint's pull queue, as for a handle.
	// Replies asked for beyond what the receiver's NIC can hold until the
	// board takes them (its RX ring, 512 descriptors in gomx's drivers, and
	// its packet buffer) are dropped by the NIC and asked for again only
	// after PullTimeout. Default 512 (four pulls of 128 frames); -1 for no
	// bound.
	PullFrames int
	// Regions bounds the large sends an endpoint has in flight (each holds
	// a region the receiver pulls from); further sends to any peer wait in
	// a queue, in order. Default 128 (Open-MX: half its 256 region ids),
	// at most 256.
	Regions int
	// Names, when set, receives Hostname for this board on NewBoard and
	// loses it on Close.
	Names *Names
	// Hostname is the name registered in Names, conventionally "host:0".
	Hostname string
	// Local configures the shortcut to endpoints of this process: on by
	// default (see LocalOptions).
	Local LocalOptions
	// ProgressThread locks the board's progress goroutine to an OS thread
	// of its own for the board's life (runtime.LockOSThread), so the
	// thread that receives and completes stays the same and can be placed
	// (QueuedBoard locks every queue's).
	ProgressThread bool
	// ProgressCPUs, when set, binds that thread to these CPUs
	// (sched_setaffinity; it implies ProgressThread), so an endpoint's
	// frames are received, matched and completed on a known core:
	// Board.ProgressCPUs reports it, and the application may place its own
	// goroutine there. NewBoard fails (closing the transport) when the
	// kernel refuses the set.
	ProgressCPUs []int

	// noTicks (package tests only) puts the board's periodic ticks an
	// hour apart from its start, so that only what a test is about runs
	// its timers: its loop's looks, its fine timer. Set before the
	// progress goroutine starts, it is read as the tick itself is.
	noTicks bool
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
		RTOMin:                250 * time.Microsecond,
		PullBlockFrames:       32,
		PullBlocks:            4,
		ZombieSends:           512,
		MaxUnacked:            1024,
		UnexpectedMaxMessages: 65536,
		UnexpectedMaxBytes:    64 << 20,
		OpenMXMTU:             9000,
		PullHandles:           maxPulls,
		PullFrames:            512,
		Regions:               128,
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
	if o.RTOMin == 0 {
		o.RTOMin = d.RTOMin
	}
	if o.RTOMax == 0 {
		o.RTOMax = max(o.ResendDelay, o.RTOMin)
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
	if o.OpenMXMTU == 0 {
		o.OpenMXMTU = d.OpenMXMTU
	}
	if o.PullHandles == 0 {
		o.PullHandles = d.PullHandles
	}
	if o.PullFrames == 0 {
		o.PullFrames = d.PullFrames
	}
	if o.Regions == 0 {
		o.Regions = d.Regions
	}
	switch {
	case o.OpenMXMTU < minMTU+ethHeaderLen:
		return o, fmt.Errorf("%w: OpenMXMTU %d below %d", ErrBadOptions, o.OpenMXMTU, minMTU+ethHeaderLen)
	case o.PullHandles < 1 || o.PullHandles > maxPulls:
		return o, fmt.Errorf("%w: PullHandles must be in 1..%d", ErrBadOptions, maxPulls)
	case o.PullFrames < -1:
		return o, fmt.Errorf("%w: PullFrames %d: want a positive bound, or -1 for none", ErrBadOptions, o.PullFrames)
	case o.Regions < 1 || o.Regions > 256:
		return o, fmt.Errorf("%w: Regions must be in 1..256", ErrBadOptions)
	case o.RendezvousThreshold < 128:
		return o, fmt.Errorf("%w: rendezvous threshold %d below the small maximum 128", ErrBadOptions, o.RendezvousThreshold)
	case o.AckDelay < 0 || o.ResendDelay < 0 || o.PullTimeout < 0:
		return o, fmt.Errorf("%w: negative delay", ErrBadOptions)
	case o.RTOMin < 0 || o.RTOMax < o.RTOMin:
		return o, fmt.Errorf("%w: RTOMin %v and RTOMax %v: want 0 < RTOMin <= RTOMax", ErrBadOptions, o.RTOMin, o.RTOMax)
	case o.NotAckedMax < 1 || o.ResendMax < 1:
		return o, fmt.Errorf("%w: NotAckedMax and ResendMax must be positive", ErrBadOptions)
	case o.PullBlockFrames < 1 || o.PullBlockFrames > 64 || o.PullBlocks < 1 || o.PullBlocks > 16:
		return o, fmt.Errorf("%w: pull blocks: 1..64 frames, 1..16 blocks", ErrBadOptions)
	case o.MaxUnacked < 1 || o.MaxUnacked > 8191:
		return o, fmt.Errorf("%w: MaxUnacked must be in 1..8191", ErrBadOptions)
	case o.UnexpectedMaxMessages < 1 || o.UnexpectedMaxBytes < 1:
		return o, fmt.Errorf("%w: unexpected queue bounds must be positive", ErrBadOptions)
	}
	for _, c := range o.ProgressCPUs {
		if c < 0 || c >= maxCPU {
			return o, fmt.Errorf("%w: ProgressCPUs has CPU %d: want 0..%d", ErrBadOptions, c, maxCPU-1)
		}
	}
	return o, nil
}
