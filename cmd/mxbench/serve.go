package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/udp"
)

// A client/server session, as omx_perf runs one: the client connects to the
// server's endpoint and sends the run's parameters in one message (tag
// tagParams); the server connects back to the message's source and answers
// tagReady; then both sides run the sizes in order, the server as the
// responder (pingpong) or the receiver (stream). When the baseline is on,
// the server's raw UDP socket (its mx port + 1) answers the client's raw
// exchange of each size right after the mx one, replying to whichever
// socket the client's frames came from.
//
// The parameters message, big-endian:
//
//	0  magic "MXB1"
//	4  mode      uint8   1 pingpong, 2 stream
//	5  flags     uint8   1 unidirectional, 2 synchronous, 4 verify, 8 baseline
//	6  pad       uint16
//	8  warmup    uint32
//	12 window    uint32
//	16 count     uint32  number of sizes, at most maxParamSizes
//	20 count × { size uint32, iterations uint32 }
const (
	paramsMagic   = "MXB1"
	paramsHeader  = 20
	maxParamSizes = 256
	maxParamIters = 100_000_000
	maxWindow     = 1024

	modePingPong = 1
	modeStream   = 2

	flagUnidir   = 1
	flagSync     = 2
	flagVerify   = 4
	flagBaseline = 8
)

// params is a decoded parameters message.
type params struct {
	mode   uint8
	flags  uint8
	warmup int
	window int
	sizes  []int
	iters  []int
}

func (p *params) encode() []byte {
	b := make([]byte, paramsHeader+8*len(p.sizes))
	copy(b, paramsMagic)
	b[4], b[5] = p.mode, p.flags
	binary.BigEndian.PutUint32(b[8:], uint32(p.warmup))
	binary.BigEndian.PutUint32(b[12:], uint32(p.window))
	binary.BigEndian.PutUint32(b[16:], uint32(len(p.sizes)))
	for i := range p.sizes {
		binary.BigEndian.PutUint32(b[paramsHeader+8*i:], uint32(p.sizes[i]))
		binary.BigEndian.PutUint32(b[paramsHeader+8*i+4:], uint32(p.iters[i]))
	}
	return b
}

// decodeParams validates and decodes a parameters message from a client.
func decodeParams(b []byte) (*params, error) {
	if len(b) < paramsHeader || string(b[:4]) != paramsMagic {
		return nil, errors.New("not an mxbench parameters message (bad length or magic): is the client an mxbench of the same version?")
	}
	p := &params{mode: b[4], flags: b[5]}
	if p.mode != modePingPong && p.mode != modeStream {
		return nil, fmt.Errorf("parameters: unknown mode %d", p.mode)
	}
	if p.flags&^(flagUnidir|flagSync|flagVerify|flagBaseline) != 0 {
		return nil, fmt.Errorf("parameters: unknown flags %#x", p.flags)
	}
	p.warmup = int(binary.BigEndian.Uint32(b[8:]))
	p.window = int(binary.BigEndian.Uint32(b[12:]))
	n := binary.BigEndian.Uint32(b[16:])
	switch {
	case p.warmup > maxParamIters:
		return nil, fmt.Errorf("parameters: warmup %d above %d", p.warmup, maxParamIters)
	case p.window < 1 || p.window > maxWindow:
		return nil, fmt.Errorf("parameters: window %d, want 1..%d", p.window, maxWindow)
	case n == 0 || n > maxParamSizes:
		return nil, fmt.Errorf("parameters: %d sizes, want 1..%d", n, maxParamSizes)
	case len(b) != paramsHeader+8*int(n):
		return nil, fmt.Errorf("parameters: %d bytes for %d sizes, want %d", len(b), n, paramsHeader+8*int(n))
	}
	for i := 0; i < int(n); i++ {
		size := int(binary.BigEndian.Uint32(b[paramsHeader+8*i:]))
		iters := int(binary.BigEndian.Uint32(b[paramsHeader+8*i+4:]))
		if size > maxMessage {
			return nil, fmt.Errorf("parameters: size %d above %s", size, units.Format(maxMessage))
		}
		if iters > maxParamIters {
			return nil, fmt.Errorf("parameters: %d iterations above %d", iters, maxParamIters)
		}
		p.sizes = append(p.sizes, size)
		p.iters = append(p.iters, iters)
	}
	return p, nil
}

// maxParamsLen is the largest parameters message.
const maxParamsLen = paramsHeader + 8*maxParamSizes

// serveFlags are serve's flags.
type serveFlags struct {
	listen  string
	epID    int
	key     uint
	wait    string
	once    bool
	timeout time.Duration
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "0.0.0.0:40000", "IP:PORT of the server's udp board; the raw UDP baseline answers on PORT+1")
	fs.IntVar(&f.epID, "endpoint", 0, "the endpoint id clients connect to")
	fs.UintVar(&f.key, "key", 0x6d786265, "the 32-bit endpoint key clients must present")
	fs.StringVar(&f.wait, "wait", "spin", "spin (busy-poll) or block")
	fs.BoolVar(&f.once, "once", false, "serve one client and exit")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up on a client after this long")
}

func runServe(stdout, stderr io.Writer, args []string) error {
	const cmd = "serve"
	var f serveFlags
	fs := newFlags(cmd, stderr)
	f.register(fs)
	if err := parse(stdout, cmd, fs, args); err != nil {
		return err
	}
	if f.epID < 0 || f.epID > 255 {
		return usagef(cmd, "--endpoint %d: want 0..255", f.epID)
	}
	if f.key > 0xFFFFFFFF {
		return usagef(cmd, "--key %#x: want a 32-bit value", f.key)
	}
	if f.wait != "spin" && f.wait != "block" {
		return usagef(cmd, "--wait %q: want spin or block", f.wait)
	}
	host, portStr, err := net.SplitHostPort(f.listen)
	if err != nil {
		return usagef(cmd, "--listen %q: %v", f.listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port >= 65535 {
		return usagef(cmd, "--listen %q: want a port in 1..65534 (the baseline uses PORT+1)", f.listen)
	}
	tr, err := udp.Listen(f.listen, udp.Options{})
	if err != nil {
		return err
	}
	opts := mx.DefaultBoardOptions()
	opts.BusyPoll = f.wait == "spin"
	board, err := mx.NewBoard(tr, opts)
	if err != nil {
		tr.Close()
		return err
	}
	defer board.Close()
	ep, err := board.OpenEndpoint(f.epID, uint32(f.key))
	if err != nil {
		return err
	}
	raw, err := listenPlainUDPString(net.JoinHostPort(host, strconv.Itoa(port+1)))
	if err != nil {
		return fmt.Errorf("the baseline's socket: %w", err)
	}
	defer raw.Close()
	fmt.Fprintf(stdout, "mxbench serve: board %v endpoint %d, baseline UDP socket %v; clients run `mxbench pingpong --transport udp --peer %s`\n",
		board.NICID().UDPAddr(), ep.ID(), raw.Addr().UDPAddr(), f.listen)
	// The peer is learnt from each client's first baseline frame.
	rawSide, err := newRawSide(raw, 0, maxMessage, f.wait == "spin")
	if err != nil {
		return err
	}
	pbuf := make([]byte, maxParamsLen)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		err := serveOne(ctx, ep, uint32(f.key), pbuf, rawSide, stdout)
		cancel()
		if err != nil {
			stderrf(stderr, "client: %v", err)
		}
		if f.once {
			return err
		}
	}
}

// serveOne waits for one client's parameters and serves its run.
func serveOne(ctx context.Context, ep *mx.Endpoint, key uint32, pbuf []byte, raw *rawSide, stdout io.Writer) error {
	r, err := ep.IRecv([][]byte{pbuf}, tagParams, matchAll, nil)
	if err != nil {
		return err
	}
	st, err := r.Wait(context.Background())
	if err != nil {
		return err
	}
	p, err := decodeParams(pbuf[:st.XferLength])
	if err != nil {
		return err
	}
	back, err := ep.Connect(ctx, st.Source.NIC, st.Source.Endpoint, key)
	if err != nil {
		return fmt.Errorf("connect back to %v: %w", st.Source, err)
	}
	raw.seq, raw.last = 0, 0       // a new client numbers its messages from 1
	maxSize := slices.Max(p.sizes) // decodeParams refuses an empty list
	f := &benchFlags{sendFlags: sendFlags{sync: p.flags&flagSync != 0}, commonFlags: commonFlags{verify: p.flags&flagVerify != 0}}
	s := newSide(ep, back, maxSize, p.window, f)
	ready, err := ep.ISend(nil, back, tagReady, nil)
	if err != nil {
		return err
	}
	if _, err := ready.Wait(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "client %v: %d sizes\n", st.Source, len(p.sizes))
	for i, size := range p.sizes {
		n := p.warmup + p.iters[i]
		if p.mode == modeStream {
			err = s.sink(ctx, size, n, p.window)
		} else {
			reply := size
			if p.flags&flagUnidir != 0 {
				reply = 0
			}
			err = s.pong(ctx, size, reply, n)
		}
		if err != nil {
			return fmt.Errorf("size %s: %w", units.Format(int64(size)), err)
		}
		if p.flags&flagBaseline != 0 {
			limit := 5 * time.Minute
			if d, ok := ctx.Deadline(); ok {
				limit = time.Until(d) // serve's --timeout
			}
			if p.mode == modeStream {
				err = rawSink(raw, limit)
			} else {
				err = rawRespond(raw, limit)
			}
			if err != nil {
				return fmt.Errorf("baseline of %s: %w", units.Format(int64(size)), err)
			}
		}
	}
	return nil
}

// clientDone, when set, is given the client's endpoint after its last size
// ran and before its board closes (the tests read its counters).
var clientDone func(*mx.Endpoint)

// runClient runs pingpong or stream against an `mxbench serve`.
func runClient(ctx context.Context, cmd string, f *benchFlags, sizes []int, rep reporter, stderr io.Writer) error {
	if f.transport != "udp" {
		return usagef(cmd, "--peer works with --transport udp (got %s)", f.transport)
	}
	host, portStr, err := net.SplitHostPort(f.peer)
	if err != nil {
		return usagef(cmd, "--peer %q: want HOST:PORT of an `mxbench serve`", f.peer)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port >= 65535 {
		return usagef(cmd, "--peer %q: bad port", f.peer)
	}
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	peerNIC, err := mx.ResolveUDP(cctx, host, uint16(port))
	if err != nil {
		return fmt.Errorf("--peer %s: %w (is the host name right?)", f.peer, err)
	}
	listen := f.listen
	if listen == "" {
		if listen, err = localFor(f.peer); err != nil {
			return err
		}
	}
	var tr transport.Transport
	tr, err = udp.Listen(listen, udp.Options{})
	if err != nil {
		return err
	}
	var wire func() fault.Counts
	faultNote := ""
	if f.faults.any() {
		// The server is another process: this board's transport carries
		// the faults both ways, sends with --seed, receives with seed+1.
		w, err := f.wrapFaults(tr, fault.WrapOptions{Send: f.faults.options(f.faults.seed), Recv: f.faults.options(f.faults.seed + 1)})
		if err != nil {
			return err
		}
		tr = w
		faultNote = ", " + f.faults.describe() + " (this board's sends and receives)"
		wire = func() fault.Counts {
			s, r := w.Counts()
			return s.Add(r)
		}
	}
	opts := f.boardOptions()
	if wire == nil {
		// The server is another process: a server on this host is reached
		// through shared memory, as `serve` reaches its clients, unless
		// GOMX_SHM=off. (boardOptions turns off the in-process shortcut,
		// which alone would keep this board off the host path.) With
		// faults the frames stay on the faulty transport.
		opts.Local.Shm = true
	}
	board, err := mx.NewBoard(tr, opts)
	if err != nil {
		tr.Close()
		return err
	}
	defer board.Close()
	key := uint32(f.key)
	ep, err := board.OpenEndpoint(mx.AnyEndpoint, key)
	if err != nil {
		return err
	}
	peer, err := ep.Connect(cctx, peerNIC, uint8(f.remoteEP), key)
	if err != nil {
		return fmt.Errorf("connect to %s endpoint %d: %w (no answer within --timeout %v: is `mxbench serve --listen %s` running there, with the same --key, and UDP port %d open?)",
			f.peer, f.remoteEP, err, f.timeout, f.peer, port)
	}
	p := params{mode: modePingPong, warmup: f.warmup, window: max(f.window, 1)}
	if cmd == "stream" {
		p.mode = modeStream
	}
	for flag, on := range map[uint8]bool{flagUnidir: f.unidir, flagSync: f.sync, flagVerify: f.verify, flagBaseline: f.baseline} {
		if on {
			p.flags |= flag
		}
	}
	for _, s := range sizes {
		p.sizes = append(p.sizes, s)
		p.iters = append(p.iters, f.iterationsFor(s))
	}
	ready, err := ep.IRecv(nil, tagReady, matchAll, nil)
	if err != nil {
		return err
	}
	sr, err := ep.ISend([][]byte{p.encode()}, peer, tagParams, nil)
	if err != nil {
		return err
	}
	if _, err := sr.Wait(cctx); err != nil {
		return fmt.Errorf("send parameters: %w", err)
	}
	if _, err := ready.Wait(cctx); err != nil {
		return fmt.Errorf("waiting for the server: %w", err)
	}
	maxSize := slices.Max(sizes)
	var rawSide *rawSide
	if f.baseline {
		raw, err := listenPlainUDPString(listen)
		if err != nil {
			return err
		}
		defer raw.Close()
		if rawSide, err = newRawSide(raw, peerNIC+1, maxSize, f.spin()); err != nil {
			return err
		}
	}
	rep.header(fmt.Sprintf("mxbench %s: udp %v -> server %s (endpoint %d)%s, %s%s", cmd, board.NICID().UDPAddr(), f.peer, f.remoteEP, faultNote, f.describeWait(), syncNote(f)))
	s := newSide(ep, peer, maxSize, f.window, f)
	if clientDone != nil {
		defer clientDone(ep)
	}
	if f.spin() {
		pin(0)
		// The pinned thread stays with this goroutine until the command ends.
	}
	for i, size := range sizes {
		sctx, cancel := context.WithTimeout(ctx, f.timeout)
		var res result
		var wireBefore fault.Counts
		if wire != nil {
			wireBefore = wire()
		}
		// Asked before the size runs: a server that served its last size
		// may be gone by the time this end has counted.
		hostPath := board.HostPath(peerNIC)
		before := ep.Counters()
		if cmd == "stream" {
			res, err = s.stream(sctx, size, p.iters[i], f.warmup, f.window)
		} else {
			reply := size
			if f.unidir {
				reply = 0
			}
			res, err = s.pingpong(sctx, size, reply, p.iters[i], f.warmup, 1) // --trials is refused with --peer
		}
		cancel()
		if cmd == "pingpong" && !f.unidir {
			// What moved the replies, from this end's counters as their
			// receiver: "network" when the server is not reached through
			// shared memory.
			res.Strategy = strategyOf(countersSince(before, ep.Counters()), "", hostPath, size).Strategy
		}
		if wire != nil {
			res.Faults = faultsBetween(f.faults, wireBefore, wire())
		}
		if err != nil {
			rep.row(res)
			return fmt.Errorf("%s of %s: %w", cmd, units.Format(int64(size)), err)
		}
		if rawSide != nil {
			var r rawResult
			if cmd == "stream" {
				r, err = rawSend(rawSide, size, p.iters[i], f.warmup)
			} else {
				reply := size
				if f.unidir {
					reply = 0
				}
				r, err = rawPing(rawSide, size, reply, p.iters[i], f.warmup)
			}
			if err != nil {
				return fmt.Errorf("UDP baseline of %s: %w", units.Format(int64(size)), err)
			}
			res.Baseline = toBaseline("udp", r, cmd)
		}
		rep.row(res)
	}
	return nil
}
