//go:build cabi && cgo

package main

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport/udp"
)

// config is what mx_init reads from the environment: the boards to open
// and their options, named as Open-MX's and MX's users know them where
// they have a counterpart.
type config struct {
	boards []string // UDP addresses, one board each
	opts   mx.BoardOptions
	// fatal is the default error handler: MX_ERRORS_ARE_FATAL unless
	// OMX_FATAL_ERRORS=0 or MX_ERRORS_ARE_FATAL=0.
	fatal bool
}

// defaultBoards is GOMX_BOARDS when unset: one UDP board on the loopback
// address with a port the kernel picks.
const defaultBoards = "udp:127.0.0.1:0"

// envBool reads a 0/1 variable; ok is false when it is unset.
func envBool(name string) (v, ok bool, err error) {
	s, set := os.LookupEnv(name)
	if !set || s == "" {
		return false, false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, false, fmt.Errorf("%s=%q: want 0 or 1", name, s)
	}
	return b, true, nil
}

// envInt reads a non-negative integer variable; ok is false when unset.
func envInt(name string) (v int, ok bool, err error) {
	s, set := os.LookupEnv(name)
	if !set || s == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%s=%q: want a non-negative integer", name, s)
	}
	return n, true, nil
}

// firstBool returns the first of names that is set (Open-MX's OMX_ name
// before MX's).
func firstBool(names ...string) (v, ok bool, err error) {
	for _, n := range names {
		if v, ok, err = envBool(n); err != nil || ok {
			return v, ok, err
		}
	}
	return false, false, nil
}

func firstInt(names ...string) (v int, ok bool, err error) {
	for _, n := range names {
		if v, ok, err = envInt(n); err != nil || ok {
			return v, ok, err
		}
	}
	return 0, false, nil
}

// loadConfig reads the environment. Every bad value is an error naming
// the variable and what it wants.
func loadConfig() (*config, error) {
	c := &config{opts: mx.DefaultBoardOptions(), fatal: true}
	spec := os.Getenv("GOMX_BOARDS")
	if spec == "" {
		spec = defaultBoards
	}
	for _, b := range strings.Split(spec, ",") {
		b = strings.TrimSpace(b)
		addr, ok := strings.CutPrefix(b, "udp:")
		if !ok {
			return nil, fmt.Errorf("GOMX_BOARDS: board %q: want udp:IP:PORT (PORT 0: the kernel picks one)", b)
		}
		if _, err := netip.ParseAddrPort(addr); err != nil {
			return nil, fmt.Errorf("GOMX_BOARDS: board %q: want udp:IP:PORT with an IPv4 address (%v)", b, err)
		}
		c.boards = append(c.boards, addr)
	}
	if len(c.boards) > maxEndpoints/mx.MaxEndpoints {
		return nil, fmt.Errorf("GOMX_BOARDS: %d boards, at most %d", len(c.boards), maxEndpoints/mx.MaxEndpoints)
	}
	ignoreMX, _, err := envBool("OMX_IGNORE_MX_ENV")
	if err != nil {
		return nil, err
	}
	names := func(omx, mxName string) []string {
		if ignoreMX || mxName == "" {
			return []string{omx}
		}
		return []string{omx, mxName}
	}
	if v, ok, err := firstBool(names("OMX_FATAL_ERRORS", "MX_ERRORS_ARE_FATAL")...); err != nil {
		return nil, err
	} else if ok {
		c.fatal = v
	}
	if v, ok, err := firstBool(names("OMX_DISABLE_SHARED", "MX_DISABLE_SHMEM")...); err != nil {
		return nil, err
	} else if ok && v {
		c.opts.Local.NoShm = true
	}
	if v, ok, err := firstBool(names("OMX_DISABLE_SELF", "MX_DISABLE_SELF")...); err != nil {
		return nil, err
	} else if ok && v {
		c.opts.Local.Off = true
	}
	if v, ok, err := firstBool("OMX_WAITSPIN"); err != nil {
		return nil, err
	} else if ok {
		c.opts.BusyPoll = v
	}
	ints := []struct {
		names []string
		set   func(int)
	}{
		{names("OMX_RNDV_THRESHOLD", ""), func(n int) { c.opts.RendezvousThreshold = n }},
		{names("OMX_SHARED_RNDV_THRESHOLD", ""), func(n int) { c.opts.Local.ShmEager = n }},
		{names("OMX_RESENDS_MAX", "MX_MAX_RETRIES"), func(n int) { c.opts.ResendMax = n }},
		{names("OMX_NOTACKED_MAX", ""), func(n int) { c.opts.NotAckedMax = n }},
		{names("OMX_ZOMBIE_SEND", "MX_ZOMBIE_SEND"), func(n int) { c.opts.ZombieSends = n }},
	}
	for _, v := range ints {
		n, ok, err := firstInt(v.names...)
		if err != nil {
			return nil, err
		}
		if ok {
			if n == 0 && v.names[0] != "OMX_ZOMBIE_SEND" {
				return nil, fmt.Errorf("%s=0: want a positive integer", v.names[0])
			}
			v.set(n)
		}
	}
	return c, nil
}

// openBoards opens the configured boards, registering board i as
// "hostname:i" in names (what mx_nic_id_to_hostname reports).
func (c *config) openBoards(names *mx.Names) ([]*mx.Board, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	var out []*mx.Board
	for i, addr := range c.boards {
		tr, err := udp.Listen(addr, udp.Options{})
		if err != nil {
			closeBoards(out)
			return nil, fmt.Errorf("GOMX_BOARDS: board %d (udp:%s): %w", i, addr, err)
		}
		opts := c.opts
		opts.Names, opts.Hostname = names, fmt.Sprintf("%s:%d", host, i)
		b, err := mx.NewBoard(tr, opts)
		if err != nil {
			tr.Close()
			closeBoards(out)
			return nil, fmt.Errorf("board %d (udp:%s): %w", i, addr, err)
		}
		out = append(out, b)
	}
	return out, nil
}

func closeBoards(bs []*mx.Board) {
	for _, b := range bs {
		b.Close()
	}
}

// msTimeout turns an MX timeout in milliseconds (0: forever) into a
// duration; 0 means no deadline.
func msTimeout(ms uint32) time.Duration {
	return time.Duration(ms) * time.Millisecond
}
