// Package mxenv reads the environment that configures gomx's MX C library
// (cmd/libmyriexpress) and its omx_info (cmd/omx_info): which boards a
// process opens and their options, named as Open-MX's and MX's users know
// them where they have a counterpart in gomx.
//
// A process of the C library opens its boards in mx_init, from
// GOMX_BOARDS: a comma-separated list of udp:IP:PORT, one board each,
// numbered from 0 in that order (default udp:127.0.0.1:0, one board on the
// loopback address with a port the kernel picks). Board i is named
// "hostname:i" in the process, as Open-MX names boards; a peer board is
// named by its UDP address, "host:port". A UDP board also reaches the
// boards of the user's other processes on the host through shared memory
// (see package mx), unless OMX_DISABLE_SHARED=1.
//
// The Open-MX variables honoured, with the MX variable Open-MX also reads
// (ignored when OMX_IGNORE_MX_ENV=1):
//
//	OMX_FATAL_ERRORS (MX_ERRORS_ARE_FATAL)  0: errors return by default
//	OMX_DISABLE_SHARED (MX_DISABLE_SHMEM)   1: no shared-memory path
//	OMX_DISABLE_SELF (MX_DISABLE_SELF)      1: messages within the process take the wire
//	                                        (other processes of the host still take shared memory)
//	OMX_WAITSPIN                            1: waits busy-poll
//	OMX_RNDV_THRESHOLD                      largest eager message on the wire
//	OMX_SHARED_RNDV_THRESHOLD               largest eager message through shared memory
//	OMX_RESENDS_MAX (MX_MAX_RETRIES)        resends before a peer is unreachable
//	OMX_NOTACKED_MAX                        messages received before an immediate ack
//	OMX_ZOMBIE_SEND (MX_ZOMBIE_SEND)        eager sends completed before their ack
//
// gomx's own variables (GOMX_SHM, GOMX_LOCAL, GOMX_SPIN, ...) apply as in
// any gomx program. A bad value is an error naming the variable and what
// it wants; mx_init then fails with MX_BAD_PARAM_VAL.
package mxenv

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport/udp"
)

// DefaultBoards is GOMX_BOARDS when it is unset or empty.
const DefaultBoards = "udp:127.0.0.1:0"

// MaxBoards is the most boards a process opens.
const MaxBoards = 16

// Config is what the environment asks for.
type Config struct {
	// Boards are the UDP addresses of the boards, in board-number order.
	Boards []netip.AddrPort
	// Options are the boards' options.
	Options mx.BoardOptions
	// Fatal is the default error handler: true for MX_ERRORS_ARE_FATAL,
	// false for MX_ERRORS_RETURN.
	Fatal bool
}

// Getenv looks a variable up; os.LookupEnv in a process.
type Getenv func(name string) (string, bool)

// Load reads the process's environment.
func Load() (*Config, error) { return Parse(os.LookupEnv) }

// Parse reads the configuration through env.
func Parse(env Getenv) (*Config, error) {
	c := &Config{Options: mx.DefaultBoardOptions(), Fatal: true}
	spec, _ := env("GOMX_BOARDS")
	if strings.TrimSpace(spec) == "" {
		spec = DefaultBoards
	}
	for _, b := range strings.Split(spec, ",") {
		b = strings.TrimSpace(b)
		addr, ok := strings.CutPrefix(b, "udp:")
		if !ok {
			return nil, fmt.Errorf("GOMX_BOARDS: board %q: want udp:IP:PORT (PORT 0: the kernel picks one)", b)
		}
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ap.Addr().Is4() {
			return nil, fmt.Errorf("GOMX_BOARDS: board %q: want udp:IP:PORT with an IPv4 address", b)
		}
		c.Boards = append(c.Boards, ap)
	}
	if len(c.Boards) > MaxBoards {
		return nil, fmt.Errorf("GOMX_BOARDS: %d boards, at most %d", len(c.Boards), MaxBoards)
	}
	r := reader{env: env}
	if ignore, ok, err := r.boolean("OMX_IGNORE_MX_ENV"); err != nil {
		return nil, err
	} else if ok {
		r.ignoreMX = ignore
	}
	flags := []struct {
		omx, mx string
		set     func(bool)
	}{
		{"OMX_FATAL_ERRORS", "MX_ERRORS_ARE_FATAL", func(v bool) { c.Fatal = v }},
		{"OMX_DISABLE_SHARED", "MX_DISABLE_SHMEM", func(v bool) { c.Options.Local.NoShm = v }},
		// Open-MX's DISABLE_SELF turns off only self-communication: with
		// Local.Off alone mx would leave the host path off too, so Shm
		// keeps it (OMX_DISABLE_SHARED's NoShm still wins).
		{"OMX_DISABLE_SELF", "MX_DISABLE_SELF", func(v bool) {
			c.Options.Local.Off = v
			if v {
				c.Options.Local.Shm = true
			}
		}},
		{"OMX_WAITSPIN", "", func(v bool) { c.Options.BusyPoll = v }},
	}
	for _, f := range flags {
		v, ok, err := first(r, f.omx, f.mx, r.boolean)
		if err != nil {
			return nil, err
		}
		if ok {
			f.set(v)
		}
	}
	ints := []struct {
		omx, mx string
		min     int
		set     func(int)
	}{
		{"OMX_RNDV_THRESHOLD", "", 0, func(n int) { c.Options.RendezvousThreshold = n }},
		{"OMX_SHARED_RNDV_THRESHOLD", "", 0, func(n int) { c.Options.Local.ShmEager = n }},
		{"OMX_RESENDS_MAX", "MX_MAX_RETRIES", 1, func(n int) { c.Options.ResendMax = n }},
		{"OMX_NOTACKED_MAX", "", 1, func(n int) { c.Options.NotAckedMax = n }},
		{"OMX_ZOMBIE_SEND", "MX_ZOMBIE_SEND", 0, func(n int) {
			if n == 0 {
				n = -1 // none: mx's ZombieSends takes 0 as its default
			}
			c.Options.ZombieSends = n
		}},
	}
	for _, v := range ints {
		n, ok, err := first(r, v.omx, v.mx, r.integer)
		if err != nil {
			return nil, err
		}
		if ok {
			if n < v.min {
				return nil, fmt.Errorf("%s=%d: want at least %d", v.omx, n, v.min)
			}
			v.set(n)
		}
	}
	return c, nil
}

// reader reads typed variables.
type reader struct {
	env      Getenv
	ignoreMX bool
}

func (r reader) boolean(name string) (bool, bool, error) {
	s, set := r.env(name)
	if !set || s == "" {
		return false, false, nil
	}
	switch s {
	case "0":
		return false, true, nil
	case "1":
		return true, true, nil
	}
	return false, false, fmt.Errorf("%s=%q: want 0 or 1", name, s)
}

func (r reader) integer(name string) (int, bool, error) {
	s, set := r.env(name)
	if !set || s == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%s=%q: want a non-negative integer", name, s)
	}
	return n, true, nil
}

// first reads Open-MX's name, else MX's (unless OMX_IGNORE_MX_ENV=1).
func first[T any](r reader, omx, mxName string, read func(string) (T, bool, error)) (T, bool, error) {
	v, ok, err := read(omx)
	if err != nil || ok || mxName == "" || r.ignoreMX {
		return v, ok, err
	}
	return read(mxName)
}

// OpenBoards opens the configured boards, registering board i as
// "hostname:i" in names. On failure it closes what it opened.
func (c *Config) OpenBoards(names *mx.Names) ([]*mx.Board, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	var out []*mx.Board
	for i, addr := range c.Boards {
		tr, err := udp.Listen(addr.String(), udp.Options{})
		if err != nil {
			CloseBoards(out)
			return nil, fmt.Errorf("GOMX_BOARDS: board %d (udp:%v): %w", i, addr, err)
		}
		opts := c.Options
		opts.Names, opts.Hostname = names, fmt.Sprintf("%s:%d", host, i)
		b, err := mx.NewBoard(tr, opts)
		if err != nil {
			tr.Close()
			CloseBoards(out)
			return nil, fmt.Errorf("board %d (udp:%v): %w", i, addr, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// CloseBoards closes bs.
func CloseBoards(bs []*mx.Board) {
	for _, b := range bs {
		b.Close()
	}
}
