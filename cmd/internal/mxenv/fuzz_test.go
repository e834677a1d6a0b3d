package mxenv

import (
	"math/big"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// boardOK is an oracle for one GOMX_BOARDS entry written apart from Parse:
// udp:, then a dotted IPv4 address (net.ParseIP), a colon and a decimal port.
func boardOK(b string) bool {
	rest, ok := strings.CutPrefix(strings.TrimSpace(b), "udp:")
	if !ok {
		return false
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || strings.ContainsAny(host, ":[]%") {
		return false
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() == nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

var decimal = regexp.MustCompile(`^[+-]?[0-9]+$`)

// intOK is an oracle for a non-negative integer variable.
func intOK(s string) bool {
	if s == "" {
		return true // unset
	}
	if !decimal.MatchString(s) {
		return false
	}
	n, _ := new(big.Int).SetString(strings.TrimPrefix(s, "+"), 10)
	return n.Sign() >= 0 && n.IsInt64()
}

func FuzzParseEnv(f *testing.F) {
	for _, seed := range [][2]string{
		{"udp:127.0.0.1:0", "32768"},
		{"udp:10.0.0.1:40000, udp:127.0.0.1:0", "+7"},
		{"eth0", "-1"},
		{"udp:[::1]:4", "99999999999999999999"},
		{"udp:1.2.3.4", "0x10"},
		{"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, boards, rndv string) {
		env := map[string]string{"GOMX_BOARDS": boards, "OMX_RNDV_THRESHOLD": rndv}
		c, err := Parse(envOf(env))
		want := true
		n := 0
		if strings.TrimSpace(boards) != "" {
			for _, b := range strings.Split(boards, ",") {
				want = want && boardOK(b)
				n++
			}
		}
		want = want && n <= MaxBoards && intOK(rndv)
		if (err == nil) != want {
			t.Fatalf("GOMX_BOARDS=%q OMX_RNDV_THRESHOLD=%q: error %v, oracle says valid=%v", boards, rndv, err, want)
		}
		if err != nil {
			return
		}
		if len(c.Boards) == 0 || len(c.Boards) > MaxBoards {
			t.Fatalf("%d boards", len(c.Boards))
		}
		for _, b := range c.Boards {
			if !b.Addr().Is4() {
				t.Fatalf("board %v is not IPv4", b)
			}
		}
		if rndv != "" {
			v, _ := strconv.Atoi(rndv)
			if c.Options.RendezvousThreshold != v {
				t.Fatalf("OMX_RNDV_THRESHOLD=%q gave %d", rndv, c.Options.RendezvousThreshold)
			}
		}
	})
}
