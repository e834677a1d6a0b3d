package mxenv

import (
	"net/netip"
	"strings"
	"testing"
)

func envOf(m map[string]string) Getenv {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Boards) != 1 || c.Boards[0] != netip.MustParseAddrPort("127.0.0.1:0") {
		t.Errorf("boards %v, want the loopback board of DefaultBoards", c.Boards)
	}
	if !c.Fatal || c.Options.Local.NoShm || c.Options.Local.Off || c.Options.BusyPoll {
		t.Errorf("defaults %+v: want fatal errors, shared memory and self on, no busy poll", c)
	}
}

func TestParse(t *testing.T) {
	c, err := Parse(envOf(map[string]string{
		"GOMX_BOARDS":               "udp:10.0.0.1:40000, udp:127.0.0.1:0",
		"OMX_FATAL_ERRORS":          "0",
		"OMX_DISABLE_SHARED":        "1",
		"MX_DISABLE_SELF":           "1",
		"OMX_WAITSPIN":              "1",
		"OMX_RNDV_THRESHOLD":        "16384",
		"OMX_SHARED_RNDV_THRESHOLD": "4096",
		"MX_MAX_RETRIES":            "7",
		"OMX_NOTACKED_MAX":          "1",
		"OMX_ZOMBIE_SEND":           "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options
	switch {
	case len(c.Boards) != 2 || c.Boards[0] != netip.MustParseAddrPort("10.0.0.1:40000"):
		t.Errorf("boards %v", c.Boards)
	case c.Fatal, !o.Local.NoShm, !o.Local.Off, !o.Local.Shm, !o.BusyPoll:
		t.Errorf("flags: fatal %v noshm %v off %v shm %v busypoll %v", c.Fatal, o.Local.NoShm, o.Local.Off, o.Local.Shm, o.BusyPoll)
	case o.RendezvousThreshold != 16384, o.Local.ShmEager != 4096, o.ResendMax != 7, o.NotAckedMax != 1:
		t.Errorf("integers: %d %d %d %d", o.RendezvousThreshold, o.Local.ShmEager, o.ResendMax, o.NotAckedMax)
	case o.ZombieSends >= 0:
		t.Errorf("OMX_ZOMBIE_SEND=0: ZombieSends %d, want negative (none)", o.ZombieSends)
	}
}

func TestParseOMXBeforeMX(t *testing.T) {
	env := map[string]string{"OMX_DISABLE_SHARED": "0", "MX_DISABLE_SHMEM": "1"}
	if c, err := Parse(envOf(env)); err != nil || c.Options.Local.NoShm {
		t.Errorf("OMX_ wins over MX_: NoShm %v, err %v", c.Options.Local.NoShm, err)
	}
	env = map[string]string{"OMX_IGNORE_MX_ENV": "1", "MX_DISABLE_SHMEM": "1"}
	if c, err := Parse(envOf(env)); err != nil || c.Options.Local.NoShm {
		t.Errorf("OMX_IGNORE_MX_ENV=1: NoShm %v, err %v", c.Options.Local.NoShm, err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"GOMX_BOARDS", "eth0", "want udp:IP:PORT"},
		{"GOMX_BOARDS", "udp:[::1]:4", "IPv4"},
		{"GOMX_BOARDS", "udp:1.2.3.4", "want udp:IP:PORT"},
		{"GOMX_BOARDS", strings.Repeat("udp:127.0.0.1:0,", MaxBoards) + "udp:127.0.0.1:0", "at most"},
		{"OMX_FATAL_ERRORS", "yes", "OMX_FATAL_ERRORS"},
		{"OMX_RNDV_THRESHOLD", "-1", "OMX_RNDV_THRESHOLD"},
		{"OMX_RESENDS_MAX", "0", "at least 1"},
		{"MX_ZOMBIE_SEND", "x", "MX_ZOMBIE_SEND"},
	} {
		_, err := Parse(envOf(map[string]string{tc.name: tc.value}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: error %v, want one saying %q", tc.name, tc.value, err, tc.want)
		}
	}
}

func TestOpenBoards(t *testing.T) {
	c, err := Parse(envOf(map[string]string{"GOMX_BOARDS": "udp:127.0.0.1:0,udp:127.0.0.1:0", "OMX_DISABLE_SHARED": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := c.OpenBoards(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseBoards(bs)
	if len(bs) != 2 || bs[0].NICID() == bs[1].NICID() {
		t.Fatalf("opened %d boards, want 2 with distinct NIC ids", len(bs))
	}
}
