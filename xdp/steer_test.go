package xdp

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/netnstest"
	"github.com/gomx-dev/gomx/internal/sysfstest"
)

// Without rules every endpoint gets a socket on every queue, and the
// program hands each frame to its endpoint's socket on the queue it came
// in on.
func TestSteerNoRules(t *testing.T) {
	requireXDP(t)
	p := netnstest.NewPair(t, 2)
	eps := []Endpoint{{ID: 3}, {ID: 9}, {ID: 200}}
	var st *Steering
	if err := p.InB(func() (err error) {
		st, err = Steer(SteerOptions{Interface: p.B, Endpoints: eps, Socket: Options{Frames: 512}, Program: ProgramOptions{Mode: DriverMode}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var txs []*Socket
	for q := range 2 {
		if err := p.InA(func() error {
			s, err := Open(p.A, q, Options{Frames: 256})
			txs = append(txs, s)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { txs[q].Close() })
	}
	for i, a := range st.Assignments() {
		if a.Slot != i || len(a.Queues) != 2 || a.Rule != -1 {
			t.Errorf("endpoint %d: %+v, want slot %d on queues [0 1] without rule", a.Endpoint.ID, a, i)
		}
		t.Logf("endpoint %d: queues %v slot %d cpu %d (%s)", a.Endpoint.ID, a.Queues, a.Slot, a.CPU, a.CPUSource)
		for q, tx := range txs {
			sendRaw(t, tx, 20, func(b []byte, n int) int {
				l := putTestFrame(b, p.MACB, p.MACA, q, uint32(n))
				b[17] = a.Endpoint.ID
				return l
			})
			for qq := range 2 {
				for slot := range eps {
					want := 0
					if qq == q && slot == i {
						want = 20
					}
					got := drain(st.Socket(qq, slot), 20, 20*time.Millisecond, true, nil)
					if got != want {
						t.Errorf("endpoint %d sent on queue %d: socket (queue %d, slot %d) got %d frames, want %d", a.Endpoint.ID, q, qq, slot, got, want)
					}
				}
			}
		}
	}
}

// A NIC without ntuple filters (veth) refuses rules with ErrNotSupported,
// and the failed Steer leaves no program attached.
func TestSteerRulesNotSupported(t *testing.T) {
	requireXDP(t)
	p := netnstest.NewPair(t, 2)
	for _, k := range []RuleKind{EtherTypeRule, MACRules, UDPPortRules} {
		err := p.InB(func() error {
			_, err := Steer(SteerOptions{Interface: p.B, Rules: k, Endpoints: []Endpoint{{ID: 1, MAC: [6]byte{2, 0, 0, 0, 0, 1}, UDPPort: 7001}}})
			return err
		})
		if !errors.Is(err, ErrNotSupported) {
			t.Errorf("%v rules on veth: %v, want ErrNotSupported", k, err)
		} else {
			t.Logf("%v: %v", k, err)
		}
		if xdpAttached(t, p.NSB, p.B) {
			t.Fatalf("%v: program left attached after a failed Steer", k)
		}
	}
}

func TestSteerOptions(t *testing.T) {
	for _, tc := range []struct {
		o    SteerOptions
		want error
	}{
		{SteerOptions{Interface: "x"}, ErrConfig},
		{SteerOptions{Interface: "x", Endpoints: make([]Endpoint, 65)}, ErrConfig},
		{SteerOptions{Interface: "x", Endpoints: []Endpoint{{ID: 1}, {ID: 1}}}, ErrConfig},
		{SteerOptions{Interface: "x", Rules: UDPPortRules, Endpoints: []Endpoint{{ID: 1}}}, ErrConfig},
	} {
		if _, err := Steer(tc.o); !errors.Is(err, tc.want) {
			t.Errorf("Steer(%+v) = %v, want %v", tc.o, err, tc.want)
		}
	}
}

// The ntuple rules carry the match in wire order with full masks.
func TestRuleEncoding(t *testing.T) {
	et := etherTypeRule(0x86DF, 3)
	if et.FlowType != flowEther || et.HU[12] != 0x86 || et.HU[13] != 0xDF || et.MU[12] != 0xff || et.MU[13] != 0xff || et.RingCookie != 3 || et.Location != rxClsLocAny {
		t.Errorf("EtherType rule: %+v", et)
	}
	mac := macRule([6]byte{2, 1, 2, 3, 4, 5}, 1)
	if mac.HU[0] != 2 || mac.HU[5] != 5 || mac.MU[0] != 0xff || mac.MU[5] != 0xff || mac.MU[12] != 0 {
		t.Errorf("MAC rule: %+v", mac)
	}
	udp := udpPortRule(0x1b59, 2)
	if udp.FlowType != flowUDPv4 || udp.HU[10] != 0x1b || udp.HU[11] != 0x59 || udp.MU[10] != 0xff || udp.MU[4] != 0 {
		t.Errorf("UDP rule: %+v", udp)
	}
}

func TestIRQName(t *testing.T) {
	for name, want := range map[string][2]string{
		"eth0-TxRx-3":   {"eth0", "3"},
		"enp1s0-rx-0":   {"enp1s0", "0"},
		"ens5-12":       {"ens5", "12"},
		"eth2-fp-1":     {"eth2", "1"},
		"virtio0-input": {"", ""},
	} {
		m := irqName.FindStringSubmatch(name)
		got := [2]string{}
		if m != nil {
			got = [2]string{m[1], m[2]}
		}
		if got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if c, ok := firstCPU("2-3,6"); c != 2 || !ok {
		t.Errorf("firstCPU = %d, %v", c, ok)
	}
}

// useProc points QueueCPU at the fake /proc described in testdata/desc
// until the test ends.
func useProc(t *testing.T, desc string) {
	root := sysfstest.Build(t, filepath.Join("testdata", desc))
	old := procRoot
	procRoot = root
	t.Cleanup(func() { procRoot = old })
}

// A transport on one rx queue of a NIC names the CPU servicing that
// queue's interrupt, read from a fake /proc in which each queue's vector
// has a CPU of its own: its effective affinity, or its allowed affinity
// when the kernel keeps no effective one and that names one CPU alone. An
// allowed affinity of several CPUs, malformed or missing affinity files,
// and a queue without a vector name none (-1), as does a transport of
// several queues, and a /proc without an interrupts table.
func TestIRQCPU(t *testing.T) {
	useProc(t, "proc-irq.txt")
	one := func(q int) *Transport {
		return &Transport{opts: TransportOptions{Interface: "ens5"}, socks: []*Socket{{iface: "ens5", queue: q}}}
	}
	for q, want := range []int{3, 1, 0, 2, 1, -1, -1, -1, 3, -1, -1} {
		if got := one(q).IRQCPU(); got != want {
			_, why := QueueCPU("ens5", q)
			t.Errorf("ens5 rx queue %d: IRQCPU %d, want %d (%s)", q, got, want, why)
		}
		cpu, why := QueueCPU("ens5", q)
		if cpu >= 0 && !strings.HasPrefix(why, procRoot) {
			t.Errorf("ens5 rx queue %d: CPU %d read from %q, want a file under %s", q, cpu, why, procRoot)
		}
		t.Logf("ens5 rx queue %d: CPU %d (%s)", q, cpu, why)
	}
	if c, _ := QueueCPU("ens50", 0); c != 2 {
		t.Errorf("ens50 rx queue 0: CPU %d, want 2", c)
	}
	both := &Transport{opts: TransportOptions{Interface: "ens5"}, socks: []*Socket{{queue: 0}, {queue: 1}}}
	if c := both.IRQCPU(); c != -1 {
		t.Errorf("a transport of rx queues 0 and 1: IRQCPU %d, want -1", c)
	}
	procRoot = t.TempDir()
	if c, why := QueueCPU("ens5", 0); c != -1 {
		t.Errorf("no interrupts table: CPU %d (%s), want -1", c, why)
	}
}
