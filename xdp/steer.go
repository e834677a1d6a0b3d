package xdp

import (
	"bufio"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// RuleKind says which ethtool ntuple rules Steer installs to put each
// endpoint's frames on its queue.
type RuleKind int

const (
	// NoRules installs nothing: frames land wherever the NIC puts them
	// (one default queue for a custom EtherType, RSS for UDP), so every
	// endpoint gets a socket on every queue. Works on every NIC.
	NoRules RuleKind = iota
	// EtherTypeRule installs one rule, EtherType 0x86DF to the first
	// queue, and serves every endpoint there (igb, igc, ice, mlx5, sfc).
	EtherTypeRule
	// MACRules installs one rule per endpoint: frames to the endpoint's
	// MAC address go to its queue (most ntuple NICs; the NIC must accept
	// the MAC: add it as a secondary address or turn on promiscuous mode).
	MACRules
	// UDPPortRules installs one rule per endpoint: IPv4/UDP frames to the
	// endpoint's port go to its queue (nearly every ntuple NIC).
	UDPPortRules
)

// String names the kind.
func (k RuleKind) String() string {
	switch k {
	case NoRules:
		return "none"
	case EtherTypeRule:
		return "ethertype"
	case MACRules:
		return "mac"
	case UDPPortRules:
		return "udp-port"
	}
	return "RuleKind(" + strconv.Itoa(int(k)) + ")"
}

// Endpoint is one endpoint to serve: its destination endpoint byte, and
// the address its frames carry for MACRules or UDPPortRules.
type Endpoint struct {
	ID      uint8   // the destination endpoint byte of its frames
	MAC     [6]byte // the destination MAC of its frames, for MACRules
	UDPPort uint16  // the destination UDP port of its frames, for UDPPortRules
}

// SteerOptions configures Steer.
type SteerOptions struct {
	// Interface is the interface to serve, in the calling thread's
	// network namespace.
	Interface string
	// Endpoints are the endpoints to serve, at most 64.
	Endpoints []Endpoint
	// Rules chooses the ntuple rules; NoRules when zero.
	Rules RuleKind
	// Queues are the queues endpoints are spread over, endpoint i on
	// Queues[i % len(Queues)] as Open-MX does; every rx queue when empty.
	Queues []int
	// Socket configures the sockets; Program the steering program (its
	// Queues and Slots are set by Steer).
	Socket  Options
	Program ProgramOptions
}

// Assignment says where an endpoint is served.
type Assignment struct {
	// Endpoint is the endpoint served.
	Endpoint Endpoint
	// Queues are the queues that can receive the endpoint's frames, and
	// on which it has a socket: its own queue when a rule steers it, every
	// queue otherwise.
	Queues []int
	// Slot is the endpoint's socket slot on those queues.
	Slot int
	// CPU is the CPU that services the first queue's interrupt, to bind
	// the endpoint's process to (Open-MX style), or -1 when unknown;
	// CPUSource says where it was read or why it is unknown.
	CPU       int
	CPUSource string
	// Rule is the location of the ntuple rule steering the endpoint, -1
	// when none.
	Rule int
}

// Steering is the set of sockets, rules and the program that serve a list
// of endpoints on one interface.
type Steering struct {
	iface   string
	prog    *Program
	sockets map[[2]int]*Socket // (queue, slot)
	rules   []uint32
	plan    []Assignment
}

// Steer attaches the steering program, installs the rules o.Rules asks for,
// and opens and registers a socket for every endpoint on every queue that
// can receive its frames. Errors wrap ErrNotSupported (the driver has no
// ntuple filters of that kind), ErrConfig, and those of Attach and Open; a
// failed Steer removes what it installed.
func Steer(o SteerOptions) (_ *Steering, err error) {
	if len(o.Endpoints) == 0 || len(o.Endpoints) > 64 {
		return nil, configErr("steer", fmt.Sprintf("%d endpoints: want 1 to 64", len(o.Endpoints)))
	}
	seen := map[uint8]bool{}
	for _, e := range o.Endpoints {
		if seen[e.ID] {
			return nil, configErr("steer", fmt.Sprintf("endpoint %d listed twice", e.ID))
		}
		seen[e.ID] = true
		if o.Rules == UDPPortRules && e.UDPPort == 0 {
			return nil, configErr("steer", fmt.Sprintf("endpoint %d has no UDPPort for UDPPortRules", e.ID))
		}
	}
	if o.Rules < NoRules || o.Rules > UDPPortRules {
		return nil, configErr("steer", "unknown "+o.Rules.String())
	}
	nq, err := RxQueues(o.Interface)
	if err != nil {
		return nil, err
	}
	queues := o.Queues
	if len(queues) == 0 {
		for q := range nq {
			queues = append(queues, q)
		}
	}
	for _, q := range queues {
		if q < 0 || q >= nq {
			return nil, &OpError{Op: "steer", Iface: o.Interface, Queue: q, Err: ErrQueue,
				Fix: fmt.Sprintf("%s has %d rx queues", o.Interface, nq)}
		}
	}
	st := &Steering{iface: o.Interface, sockets: map[[2]int]*Socket{}}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()

	po := o.Program
	po.Queues = nq
	po.Slots = 1 << bits.Len(uint(len(o.Endpoints)-1))
	if st.prog, err = Attach(o.Interface, po); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, opErr("socket", o.Interface, -1, err)
	}
	defer unix.Close(fd)

	for i, e := range o.Endpoints {
		a := Assignment{Endpoint: e, Slot: i, Rule: -1}
		q := queues[i%len(queues)]
		var spec *ethtoolRxFlowSpec
		switch o.Rules {
		case NoRules:
			a.Queues = queues
		case EtherTypeRule:
			q = queues[0]
			a.Queues = []int{q}
			if i == 0 {
				spec = etherTypeRule(po.etherType(), q)
			}
		case MACRules:
			a.Queues = []int{q}
			spec = macRule(e.MAC, q)
		case UDPPortRules:
			a.Queues = []int{q}
			spec = udpPortRule(e.UDPPort, q)
		}
		if spec != nil {
			loc, err := insertRule(fd, o.Interface, spec)
			if err != nil {
				return nil, err
			}
			st.rules = append(st.rules, loc)
			a.Rule = int(loc)
		} else if o.Rules == EtherTypeRule && len(st.rules) > 0 {
			a.Rule = int(st.rules[0])
		}
		a.CPU, a.CPUSource = QueueCPU(o.Interface, a.Queues[0])
		if err := st.prog.SetEndpoint(e.ID, i); err != nil {
			return nil, err
		}
		for _, q := range a.Queues {
			if err := st.openSocket(q, i, o.Socket); err != nil {
				return nil, err
			}
		}
		st.plan = append(st.plan, a)
	}
	return st, nil
}

// etherType is the EtherType the program matches.
func (o ProgramOptions) etherType() uint16 {
	if o.EtherType == 0 {
		return EtherTypeOpenMX
	}
	return o.EtherType
}

// openSocket opens the socket of (queue, slot), sharing the UMEM of the
// queue's first socket, and registers it.
func (st *Steering) openSocket(q, slot int, o Options) error {
	var owner *Socket
	for k, s := range st.sockets {
		if k[0] == q {
			owner = s
			break
		}
	}
	var s *Socket
	var err error
	if owner == nil {
		s, err = Open(st.iface, q, o)
	} else {
		s, err = OpenShared(owner, o)
	}
	if err != nil {
		return err
	}
	st.sockets[[2]int{q, slot}] = s
	return st.prog.Register(s, slot)
}

// Assignments says, for each endpoint, its queues, slot, CPU and rule.
func (st *Steering) Assignments() []Assignment { return st.plan }

// Socket returns the socket of slot on queue, nil if there is none.
func (st *Steering) Socket(queue, slot int) *Socket { return st.sockets[[2]int{queue, slot}] }

// Program is the steering program.
func (st *Steering) Program() *Program { return st.prog }

// Close removes the rules, closes the sockets and detaches the program.
func (st *Steering) Close() error {
	var errs []error
	if len(st.rules) > 0 {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			errs = append(errs, err)
		} else {
			for _, loc := range st.rules {
				nfc := ethtoolRxnfc{Cmd: ethtoolSRxClsRlDel}
				nfc.FS.Location = loc
				if err := ethtoolRxnfcCmd(fd, st.iface, &nfc); err != nil {
					errs = append(errs, opErr(fmt.Sprintf("ETHTOOL_SRXCLSRLDEL rule %d", loc), st.iface, -1, err))
				}
			}
			unix.Close(fd)
		}
		st.rules = nil
	}
	for k, s := range st.sockets {
		errs = append(errs, s.Close())
		delete(st.sockets, k)
	}
	if st.prog != nil {
		errs = append(errs, st.prog.Close())
	}
	return errors.Join(errs...)
}

// etherTypeRule is "flow-type ether proto ET action Q".
func etherTypeRule(et uint16, q int) *ethtoolRxFlowSpec {
	fs := &ethtoolRxFlowSpec{FlowType: flowEther, RingCookie: uint64(q), Location: rxClsLocAny}
	fs.HU[etherSpecProto], fs.HU[etherSpecProto+1] = byte(et>>8), byte(et)
	fs.MU[etherSpecProto], fs.MU[etherSpecProto+1] = 0xff, 0xff
	return fs
}

// macRule is "flow-type ether dst MAC action Q".
func macRule(mac [6]byte, q int) *ethtoolRxFlowSpec {
	fs := &ethtoolRxFlowSpec{FlowType: flowEther, RingCookie: uint64(q), Location: rxClsLocAny}
	copy(fs.HU[etherSpecDst:], mac[:])
	for i := range 6 {
		fs.MU[etherSpecDst+i] = 0xff
	}
	return fs
}

// udpPortRule is "flow-type udp4 dst-port P action Q".
func udpPortRule(port uint16, q int) *ethtoolRxFlowSpec {
	fs := &ethtoolRxFlowSpec{FlowType: flowUDPv4, RingCookie: uint64(q), Location: rxClsLocAny}
	fs.HU[tcpip4SpecPDst], fs.HU[tcpip4SpecPDst+1] = byte(port>>8), byte(port)
	fs.MU[tcpip4SpecPDst], fs.MU[tcpip4SpecPDst+1] = 0xff, 0xff
	return fs
}

// insertRule installs an ntuple rule (ETHTOOL_SRXCLSRLINS) and returns its
// location. It asks the driver to choose one (RX_CLS_LOC_ANY) and, for
// drivers that cannot, takes the first free location of the rule table.
func insertRule(fd int, iface string, fs *ethtoolRxFlowSpec) (uint32, error) {
	nfc := ethtoolRxnfc{Cmd: ethtoolSRxClsRlIns, FS: *fs}
	err := ethtoolRxnfcCmd(fd, iface, &nfc)
	if err == nil {
		return nfc.FS.Location, nil
	}
	if errors.Is(err, unix.EINVAL) {
		locs, size, lerr := ethtoolRuleLocations(fd, iface)
		if lerr == nil {
			used := map[uint32]bool{}
			for _, l := range locs {
				used[l] = true
			}
			for l := uint32(0); l < size; l++ {
				if !used[l] {
					nfc = ethtoolRxnfc{Cmd: ethtoolSRxClsRlIns, FS: *fs}
					nfc.FS.Location = l
					if err = ethtoolRxnfcCmd(fd, iface, &nfc); err == nil {
						return l, nil
					}
					break
				}
			}
		}
	}
	oe := opErr("ETHTOOL_SRXCLSRLINS", iface, int(fs.RingCookie), err)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
		oe.Err = &wrapped{ErrNotSupported, err}
		oe.Fix = "the driver has no ntuple filter of this kind: check `ethtool -k " + iface + " | grep ntuple`, turn it on with `ethtool -K " + iface + " ntuple on`, or use Rules NoRules"
	}
	return 0, oe
}

// irqName matches the per-queue interrupt names drivers give: IFACE-TxRx-Q
// (Intel), IFACE-rx-Q, IFACE-Q, IFACE-fp-Q (bnx2x/qede), IFACE-rxtx-Q.
var irqName = regexp.MustCompile(`^(.+?)-(?:TxRx-|rx-|rxtx-|fp-|txrx-|)(\d+)$`)

// procRoot is where QueueCPU reads the kernel's interrupt tables
// (interrupts, irq/N/...); tests point it at a fake tree.
var procRoot = "/proc"

// QueueCPU returns the CPU that services rx queue q of iface, for the
// interrupt named after the interface and the queue in /proc/interrupts:
// the first CPU of its effective affinity, or, where the kernel keeps
// none, its allowed affinity (smp_affinity_list) when that names one CPU
// alone. It returns -1 and the reason when there is no such interrupt
// (virtual devices: veth runs the receive path on the sending CPU; drivers
// that name vectors otherwise) or neither list names the CPU: an allowed
// mask of several CPUs says where the interrupt may go, not where it goes.
// Otherwise the reason is the file the CPU was read from.
func QueueCPU(iface string, q int) (int, string) {
	f, err := os.Open(filepath.Join(procRoot, "interrupts"))
	if err != nil {
		return -1, err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		irq, ok := strings.CutSuffix(fields[0], ":")
		if !ok {
			continue
		}
		if _, err := strconv.Atoi(irq); err != nil {
			continue
		}
		m := irqName.FindStringSubmatch(fields[len(fields)-1])
		if m == nil || m[1] != iface || m[2] != strconv.Itoa(q) {
			continue
		}
		return irqCPU(irq)
	}
	if err := sc.Err(); err != nil {
		return -1, err.Error()
	}
	return -1, "no interrupt named after " + iface + " queue " + strconv.Itoa(q) + " in /proc/interrupts (virtual device, or the driver names its vectors otherwise)"
}

// irqCPU returns the CPU that services interrupt irq, as QueueCPU says.
func irqCPU(irq string) (int, string) {
	dir := filepath.Join(procRoot, "irq", irq)
	eff := filepath.Join(dir, "effective_affinity_list")
	if b, err := os.ReadFile(eff); err == nil {
		if cpu, ok := firstCPU(strings.TrimSpace(string(b))); ok {
			return cpu, eff
		}
	}
	allowed := filepath.Join(dir, "smp_affinity_list")
	b, err := os.ReadFile(allowed)
	if err != nil {
		return -1, "no CPU in " + eff + ", and " + err.Error()
	}
	list := strings.TrimSpace(string(b))
	if cpu, err := strconv.ParseUint(list, 10, 31); err == nil {
		return int(cpu), allowed
	}
	return -1, "no CPU in " + eff + ", and " + allowed + " allows " + strconv.Quote(list) + ", not one CPU: which serves is unknown"
}

// IRQCPU implements transport.IRQCPU: the CPU servicing the interrupt of
// the rx queue the transport receives on (QueueCPU), read again at every
// call so that it follows the kernel (irqbalance moves vectors); -1 when
// the transport serves several rx queues (a queue transport, OpenQueue,
// serves one) or the queue has no interrupt QueueCPU finds (veth).
func (t *Transport) IRQCPU() int {
	if len(t.socks) != 1 {
		return -1
	}
	cpu, _ := QueueCPU(t.opts.Interface, t.socks[0].Queue())
	return cpu
}

// firstCPU returns the first CPU of a list like "2-3,6".
func firstCPU(list string) (int, bool) {
	first, _, _ := strings.Cut(list, ",")
	first, _, _ = strings.Cut(first, "-")
	n, err := strconv.Atoi(first)
	return n, err == nil
}
