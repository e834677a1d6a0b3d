// Package launch lets a gomx program run as one rank of a job started by
// the launchers users already have, and trade endpoint addresses with the
// other ranks.
//
// FromEnv reads the rank and size a launcher gives each process: Open MPI's
// mpirun (OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE), Slurm's srun
// (SLURM_PROCID and SLURM_NTASKS) and PMI or PMIx launchers such as MPICH's
// hydra (PMI_RANK and PMI_SIZE, or PMIX_RANK with PMI_SIZE), in that order
// of precedence.
//
// Exchange is the bootstrap, as NCCL and Gloo do it: rank 0 listens on an
// address every rank knows (Bootstrap finds it), each other rank
// connects and sends its record (a few bytes: an endpoint address), and
// rank 0 answers every connection with the table of all records, in rank
// order. It runs once at start-up over TCP, so it works on one node or
// many; the messages themselves then take mx. Records are framed with
// lengths and checked on receipt (decodeTable), so a stray connection or a
// torn message yields an error, not a bad table.
//
// # Where rank 0 listens
//
// Bootstrap picks the address, in this order:
//
//   - GOMX_BOOTSTRAP=host:port (or unix:PATH, unix:@NAME) when set: always
//     wins, and is the way for launchers that do not say where rank 0 runs.
//   - A job on one node whose launcher names it: an abstract unix socket
//     private to the user and the job, "unix:@gomx-boot-UID-LAUNCHER-ID".
//   - A Slurm job step on several nodes: the first host of
//     SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), in Slurm's hostlist
//     syntax (ExpandHostlist), where srun places task 0 with every
//     distribution but an arbitrary one, and a TCP port derived from the
//     job and step ids (SlurmPort: PortBase to PortBase+PortSpan-1, below
//     Linux's ephemeral ports, so that the steps of one job and the jobs
//     following each other get different ports). Rank 0 checks that it is
//     on node 0 (SLURM_NODEID) and listens on every address of its host
//     when the host is a name (a name may resolve to a loopback address on
//     its own host, as Debian's 127.0.1.1 does); the other ranks connect,
//     retrying until their context ends.
//   - A PMI launcher that hands each process a PMI-1 connection (MPICH's
//     hydra: PMI_FD, or PMI_PORT and PMI_ID), on one node or many: no
//     listener at all; the records go through the launcher's key-value
//     space (PMIAddr, pmi.go).
//   - Open MPI across nodes (and other PMIx launchers): each rank learns
//     its local daemon's PMIx server (PMIX_SERVER_URI41 and its elders),
//     not where rank 0 runs; again no listener: the records go through
//     the daemons' key-value store, committed, collected by a fence and
//     got one by one (PMIxAddr, pmix.go), as MPI libraries trade their
//     business cards.
//
// When none applies the error names what Bootstrap tried and the way
// out, GOMX_BOOTSTRAP (mpirun -x passes it on).
//
// # Where a rank binds
//
// The records a rank trades name its endpoints, so those must be bound to
// an address the ranks of other nodes reach. BindAddr picks it when the
// user names none: 127.0.0.1 on one node; across nodes the source
// address of the route to a host the launcher names (another node of a
// Slurm step, Open MPI's mpirun, rank 0's GOMX_BOOTSTRAP host). MPICH's
// hydra names no other host, so there a rank does as MPICH does: it takes
// the interface mpiexec -iface names, else the address its node's name
// resolves to (the name hydra's host list gives it, then the host's
// own), when that address is this node's and not a loopback one, else the
// source of the default route.
package launch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Job is this process's place in a job.
type Job struct {
	Rank, Size int
	// Launcher names where Rank and Size came from ("openmpi", "slurm",
	// "pmi", "pmix").
	Launcher string
	// OneNode is set when the launcher says every rank runs on this node
	// (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, Slurm's SLURM_STEP_NUM_NODES
	// or SLURM_NNODES, MPICH's MPI_LOCALNRANKS).
	OneNode bool
	// NodeRanks is the most ranks the launcher says share a node: Size
	// when OneNode, else this node's (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE,
	// MPICH's MPI_LOCALNRANKS) or, under Slurm, the most any node of the
	// step runs (SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE); 0
	// when the launcher does not say.
	NodeRanks int
	// ID names the job for the launcher (Open MPI's job id, Slurm's job
	// and step, PMIx's namespace), or is empty when it gives none.
	ID string
	// NodeList names the job's nodes in Slurm's hostlist syntax, with
	// this process on node NodeID of it and NumNodes in all (Slurm's
	// SLURM_STEP_NODELIST, SLURM_NODEID, SLURM_STEP_NUM_NODES); it is
	// empty when the launcher does not say.
	NodeList         string
	NodeID, NumNodes int
	// HeadHost is an address of the host the launcher runs its head on,
	// which the launcher's daemons on every node reach (Open MPI: mpirun's
	// first address in OMPI_MCA_orte_hnp_uri), or "" when it does not say.
	HeadHost string
}

// PeerHost returns a host that ranks of other nodes reach this one from:
// a host of the job other than this process's (the next node of
// NodeList), else HeadHost; or "" when the job is on one node or the
// launcher names neither. A rank binds the local address that routes to
// it, so that ranks of other nodes can reach its endpoints (on the head's
// own node that is the head's address itself).
func (j Job) PeerHost() string {
	if j.OneNode {
		return ""
	}
	if j.NodeList == "" || j.NumNodes < 2 {
		return j.HeadHost
	}
	h, err := NthHost(j.NodeList, (j.NodeID+1)%j.NumNodes)
	if err != nil {
		return ""
	}
	return h
}

// hnpHost returns the first address of Open MPI's mpirun from its URI,
// "JOBID.VPID;tcp://IP[,IP...]:PORT[;tcp6://[IP]:PORT...]", or "".
func hnpHost(uri string) string {
	for _, u := range strings.Split(uri, ";") {
		for _, p := range []string{"tcp://", "tcp6://"} {
			if a, ok := strings.CutPrefix(u, p); ok {
				if i := strings.LastIndexByte(a, ':'); i > 0 {
					a = a[:i]
				}
				a, _, _ = strings.Cut(a, ",")
				a = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
				if _, err := netip.ParseAddr(a); err == nil {
					return a
				}
			}
		}
	}
	return ""
}

// MaxSize bounds the ranks of a job and MaxRecord the bytes of one record.
const (
	MaxSize   = 1 << 16
	MaxRecord = 1 << 16
)

// ErrNoLauncher is returned by FromEnv outside a launcher.
var ErrNoLauncher = errors.New("launch: no launcher environment (OMPI_COMM_WORLD_RANK, SLURM_PROCID or PMI_RANK): start the program with mpirun, srun or a PMI launcher, or give rank and size yourself")

// FromEnv reads rank and size from the launcher's environment, through
// getenv (os.Getenv in programs).
func FromEnv(getenv func(string) string) (Job, error) {
	for _, l := range []struct{ name, rank, size string }{
		{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
		{"slurm", "SLURM_PROCID", "SLURM_NTASKS"},
		{"pmi", "PMI_RANK", "PMI_SIZE"},
		{"pmix", "PMIX_RANK", "PMI_SIZE"},
	} {
		rs := getenv(l.rank)
		if rs == "" {
			continue
		}
		ss := getenv(l.size)
		rank, err1 := strconv.Atoi(rs)
		size, err2 := strconv.Atoi(ss)
		if err1 != nil || err2 != nil || size < 1 || size > MaxSize || rank < 0 || rank >= size {
			return Job{}, fmt.Errorf("launch: %s=%q %s=%q: want 0 <= rank < size <= %d", l.rank, rs, l.size, ss, MaxSize)
		}
		j := Job{Rank: rank, Size: size, Launcher: l.name}
		j.OneNode, j.ID = placement(l.name, size, getenv)
		j.NodeRanks = nodeRanks(l.name, getenv)
		if j.OneNode {
			j.NodeRanks = size
		}
		if l.name == "slurm" && !j.OneNode {
			j.NodeList, j.NodeID, j.NumNodes = slurmNodes(getenv)
		}
		if l.name == "openmpi" && !j.OneNode {
			j.HeadHost = hnpHost(getenv("OMPI_MCA_orte_hnp_uri"))
		}
		return j, nil
	}
	return Job{}, ErrNoLauncher
}

// placement reads whether all size ranks share this node, and the job's id,
// from the launcher's environment.
func placement(launcher string, size int, getenv func(string) string) (oneNode bool, id string) {
	is := func(name string, want int) bool {
		n, err := strconv.Atoi(getenv(name))
		return err == nil && n == want
	}
	switch launcher {
	case "openmpi":
		oneNode = is("OMPI_COMM_WORLD_LOCAL_SIZE", size) || is("OMPI_MCA_orte_num_nodes", 1)
		id = getenv("OMPI_MCA_ess_base_jobid")
		if id == "" {
			id = getenv("PMIX_NAMESPACE")
		}
	case "slurm":
		oneNode = is("SLURM_STEP_NUM_NODES", 1) || (getenv("SLURM_STEP_NUM_NODES") == "" && is("SLURM_NNODES", 1))
		if j := getenv("SLURM_JOB_ID"); j != "" {
			id = j + "." + getenv("SLURM_STEP_ID")
			// Job ids restart in a new cluster: two clusters on one host
			// (hack/slurm's private ones) name their jobs apart.
			if c := getenv("SLURM_CLUSTER_NAME"); c != "" {
				id = c + "-" + id
			}
		}
	default:
		oneNode = is("MPI_LOCALNRANKS", size)
		id = getenv("PMIX_NAMESPACE")
	}
	return oneNode, id
}

// nodeRanks reads the most ranks that share a node from the launcher's
// environment (Job.NodeRanks), 0 when it does not say.
func nodeRanks(launcher string, getenv func(string) string) int {
	switch launcher {
	case "openmpi":
		n, _ := strconv.Atoi(getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
		return max(n, 0)
	case "slurm":
		tpn := getenv("SLURM_STEP_TASKS_PER_NODE")
		if tpn == "" {
			tpn = getenv("SLURM_TASKS_PER_NODE")
		}
		return mostTasks(tpn)
	}
	n, _ := strconv.Atoi(getenv("MPI_LOCALNRANKS"))
	return max(n, 0)
}

// mostTasks returns the largest count of Slurm's tasks-per-node list,
// "4(x2),3" (4 tasks on each of 2 nodes, then 3 on one), or 0 for a list
// it cannot read.
func mostTasks(list string) int {
	most := 0
	for _, e := range strings.Split(list, ",") {
		count, rep, repeated := strings.Cut(e, "(x")
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 {
			return 0
		}
		if repeated {
			if r, err := strconv.Atoi(strings.TrimSuffix(rep, ")")); err != nil || r < 1 || !strings.HasSuffix(rep, ")") {
				return 0
			}
		}
		most = max(most, n)
	}
	return most
}

// slurmNodes reads a Slurm step's nodes: the hostlist, this process's
// index in it and their number (zero values when Slurm does not say).
func slurmNodes(getenv func(string) string) (list string, id, n int) {
	list, count := getenv("SLURM_STEP_NODELIST"), getenv("SLURM_STEP_NUM_NODES")
	if list == "" {
		list, count = getenv("SLURM_JOB_NODELIST"), getenv("SLURM_NNODES")
	}
	n, _ = strconv.Atoi(count)
	id, _ = strconv.Atoi(getenv("SLURM_NODEID"))
	return list, id, n
}

// The TCP ports SlurmPort derives rank 0's from: PortBase to
// PortBase+PortSpan-1, below the kernel's default ephemeral range
// (32768-60999), so an outgoing connection never holds the port a job's
// rank 0 needs.
const (
	PortBase = 28000
	PortSpan = 4096
)

// SlurmPort is the TCP port rank 0 of Slurm step job.step listens on when
// nothing else says: PortBase + (16*job + step) mod PortSpan, so the first
// sixteen steps of a job, and consecutive jobs, get different ports.
func SlurmPort(job, step uint64) int {
	return PortBase + int((16*job+step)%PortSpan)
}

// Bootstrap returns the address Exchange meets rank 0 at (through getenv):
// GOMX_BOOTSTRAP when set, else an abstract unix socket private to this
// user and job when the job runs on one node, else, for Slurm, the first
// node of the step and SlurmPort, else, under a launcher that hands out a
// PMI-1 connection, PMIAddr, else, under Open MPI or another launcher
// that names a PMIx server, PMIxAddr (see the package doc). Anything else
// needs GOMX_BOOTSTRAP, and the error says what was tried.
func Bootstrap(job Job, getenv func(string) string) (string, error) {
	if getenv("GOMX_BOOTSTRAP") == "" && job.OneNode && job.ID != "" {
		return fmt.Sprintf("unix:@gomx-boot-%d-%s-%s", os.Getuid(), job.Launcher, job.ID), nil
	}
	if getenv("GOMX_BOOTSTRAP") == "" && job.Launcher == "slurm" && job.NodeList != "" {
		return slurmBootstrap(job, getenv)
	}
	if getenv("GOMX_BOOTSTRAP") == "" && (job.Launcher == "pmi" || job.Launcher == "pmix") && hasPMI(getenv) {
		return PMIAddr, nil
	}
	if getenv("GOMX_BOOTSTRAP") == "" && (job.Launcher == "openmpi" || job.Launcher == "pmix") && hasPMIx(getenv) {
		return PMIxAddr, nil
	}
	a, err := BootstrapAddr(getenv)
	if err != nil && job.Size > 1 && !job.OneNode {
		err = fmt.Errorf("%w (the job spans nodes, or %s does not say it runs on one; tried %s)", err, job.Launcher, tried(job, getenv))
	}
	return a, err
}

// tried says which ways to rank 0 Bootstrap found closed, for a job
// that spans nodes (or whose launcher does not say it runs on one).
func tried(job Job, getenv func(string) string) string {
	var t []string
	switch job.Launcher {
	case "openmpi":
		t = append(t, fmt.Sprintf("one node (OMPI_COMM_WORLD_LOCAL_SIZE=%q of %d ranks)", getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), job.Size))
	case "slurm":
		t = append(t, "one node (SLURM_STEP_NUM_NODES, SLURM_NNODES)", "the step's node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST: unset)")
	default:
		t = append(t, "one node (MPI_LOCALNRANKS)", "a PMI-1 connection (PMI_FD, PMI_PORT: unset)")
	}
	if job.Launcher != "slurm" {
		pmix := "a PMIx server (PMIX_SERVER_URI41 ... PMIX_SERVER_URI2 with PMIX_NAMESPACE and PMIX_RANK: unset"
		if job.Launcher == "openmpi" {
			pmix += "; an Open MPI before 2.0?"
		}
		t = append(t, pmix+")")
	}
	return strings.Join(t, ", ")
}

// slurmBootstrap derives rank 0's address from a Slurm step's nodes and
// ids.
func slurmBootstrap(job Job, getenv func(string) string) (string, error) {
	host, err := NthHost(job.NodeList, 0)
	if err != nil {
		return "", fmt.Errorf("%w; or export GOMX_BOOTSTRAP=host:port", err)
	}
	jid, err1 := strconv.ParseUint(getenv("SLURM_JOB_ID"), 10, 64)
	sid, err2 := strconv.ParseUint(getenv("SLURM_STEP_ID"), 10, 64)
	if getenv("SLURM_STEP_ID") == "" {
		sid, err2 = 0, nil // a batch script's own tasks: no step
	}
	if err1 != nil || err2 != nil {
		return "", fmt.Errorf("launch: SLURM_JOB_ID=%q SLURM_STEP_ID=%q are not numbers: export GOMX_BOOTSTRAP=host:port", getenv("SLURM_JOB_ID"), getenv("SLURM_STEP_ID"))
	}
	if job.Rank == 0 && job.NodeID != 0 {
		return "", fmt.Errorf("launch: rank 0 runs on node %d of %s, not its first (an arbitrary distribution?): export GOMX_BOOTSTRAP=host:port, an address of rank 0's node", job.NodeID, job.NodeList)
	}
	return net.JoinHostPort(host, strconv.Itoa(SlurmPort(jid, sid))), nil
}

// BootstrapAddr returns rank 0's address from GOMX_BOOTSTRAP (through
// getenv).
func BootstrapAddr(getenv func(string) string) (string, error) {
	a := getenv("GOMX_BOOTSTRAP")
	if a == "" {
		return "", errors.New("launch: GOMX_BOOTSTRAP is not set: export GOMX_BOOTSTRAP=host:port, an address of rank 0's host that every rank can reach (mpirun -x GOMX_BOOTSTRAP passes it on)")
	}
	if strings.HasPrefix(a, "unix:") {
		if len(a) == len("unix:") {
			return "", fmt.Errorf("launch: GOMX_BOOTSTRAP=%q: want unix:PATH or unix:@NAME", a)
		}
		return a, nil
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", fmt.Errorf("launch: GOMX_BOOTSTRAP=%q: want host:port (or unix:PATH, unix:@NAME on one node): %v", a, err)
	}
	return a, nil
}

// network splits a bootstrap address into the network and address
// net.Listen and net.Dial take.
func network(addr string) (string, string) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		return "unix", p
	}
	return "tcp", addr
}

// Listen opens rank 0's listener on a bootstrap address (host:port or
// unix:...), for a program that must listen before it starts the other
// ranks (Serve then takes it). When host is a name rather than an IP
// address it listens on every address of this host: a name may resolve to
// a loopback address here (Debian's 127.0.1.1) and to the reachable one on
// the other nodes.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	nw, a := network(addr)
	if host, port, err := net.SplitHostPort(a); nw == "tcp" && err == nil && host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			a = net.JoinHostPort("", port)
		}
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, nw, a)
	if err != nil {
		return nil, fmt.Errorf("launch: rank 0 listens on %s: %w", addr, err)
	}
	return ln, nil
}

// checkPeer refuses a unix-socket peer of another user: only the job's
// own processes may trade records on a socket anyone on the host can
// reach. TCP peers cannot be checked this way; jobs across nodes trust
// their network as the launchers do.
func checkPeer(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("process %d of uid %d is not of this job's user (uid %d)", cred.Pid, cred.Uid, os.Getuid())
	}
	return nil
}

// Exchange trades records with every rank of job through rank 0 at addr
// (it listens there; the others connect, retrying until ctx ends) and
// returns the records of all ranks, in rank order. At PMIAddr it trades
// them through the launcher's PMI-1 server instead, once per process.
func Exchange(ctx context.Context, job Job, addr string, mine []byte) ([][]byte, error) {
	switch addr {
	case PMIAddr:
		return pmiExchange(ctx, job, mine, os.Getenv)
	case PMIxAddr:
		return pmixExchange(ctx, job, mine, os.Getenv)
	}
	if job.Rank == 0 {
		ln, err := Listen(ctx, addr)
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		return Serve(ctx, ln, job.Size, mine)
	}
	return Join(ctx, addr, job.Rank, mine)
}

// Serve is rank 0's side of Exchange on ln: it waits for the size-1 other
// ranks, then sends each the table.
func Serve(ctx context.Context, ln net.Listener, size int, mine []byte) ([][]byte, error) {
	if size < 1 || size > MaxSize || len(mine) > MaxRecord {
		return nil, fmt.Errorf("launch: size %d (1..%d), record %d bytes (at most %d)", size, MaxSize, len(mine), MaxRecord)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	table := make([][]byte, size)
	table[0] = mine
	conns := make([]net.Conn, 0, size-1)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for len(conns) < size-1 {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("launch: rank 0 heard from %d of %d ranks: %w", len(conns)+1, size, ctx.Err())
			}
			return nil, fmt.Errorf("launch: rank 0 accepts: %w", err)
		}
		if err := checkPeer(c); err != nil {
			c.Close() // another user's process: not one of the ranks
			continue
		}
		conns = append(conns, c)
		c.SetDeadline(deadline(ctx))
		rank, rec, err := readRecord(c)
		switch {
		case err != nil:
			return nil, fmt.Errorf("launch: from %v: %w", c.RemoteAddr(), err)
		case rank < 1 || rank >= size:
			return nil, fmt.Errorf("launch: %v says it is rank %d of %d", c.RemoteAddr(), rank, size)
		case table[rank] != nil:
			return nil, fmt.Errorf("launch: rank %d joined twice (two jobs on one GOMX_BOOTSTRAP address?)", rank)
		}
		table[rank] = rec
	}
	msg := encodeTable(table)
	for _, c := range conns {
		if _, err := c.Write(msg); err != nil {
			return nil, fmt.Errorf("launch: send the table to %v: %w", c.RemoteAddr(), err)
		}
	}
	return table, nil
}

// Join is the side of Exchange of a rank other than 0.
func Join(ctx context.Context, addr string, rank int, mine []byte) ([][]byte, error) {
	if err := recordErr(mine); err != nil {
		return nil, err
	}
	var d net.Dialer
	var c net.Conn
	nw, a := network(addr)
	for wait := time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		var err error
		if c, err = d.DialContext(ctx, nw, a); err == nil {
			break
		}
		t := time.NewTimer(wait) // rank 0 may not listen yet
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("launch: rank %d reaches rank 0 at %s: %v (%w)", rank, addr, err, ctx.Err())
		case <-t.C:
		}
	}
	defer c.Close()
	if err := checkPeer(c); err != nil {
		return nil, fmt.Errorf("launch: rank %d at %s: %w", rank, addr, err)
	}
	c.SetDeadline(deadline(ctx))
	if _, err := c.Write(appendRecord(nil, rank, mine)); err != nil {
		return nil, fmt.Errorf("launch: rank %d sends to rank 0: %w", rank, err)
	}
	buf, err := io.ReadAll(io.LimitReader(c, 4+MaxSize*(8+MaxRecord)))
	if err != nil {
		return nil, fmt.Errorf("launch: rank %d reads the table: %w", rank, err)
	}
	table, err := decodeTable(buf)
	if err != nil {
		return nil, fmt.Errorf("launch: rank %d: %w", rank, err)
	}
	if rank >= len(table) {
		return nil, fmt.Errorf("launch: rank %d: a table of %d ranks", rank, len(table))
	}
	return table, nil
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func appendRecord(b []byte, rank int, rec []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(rank))
	b = binary.BigEndian.AppendUint32(b, uint32(len(rec)))
	return append(b, rec...)
}

func readRecord(r io.Reader) (int, []byte, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, fmt.Errorf("short record header: %w", err)
	}
	n := binary.BigEndian.Uint32(h[4:])
	if n > MaxRecord {
		return 0, nil, fmt.Errorf("record of %d bytes, at most %d", n, MaxRecord)
	}
	rec := make([]byte, n)
	if _, err := io.ReadFull(r, rec); err != nil {
		return 0, nil, fmt.Errorf("short record: %w", err)
	}
	return int(binary.BigEndian.Uint32(h[:4])), rec, nil
}

// encodeTable frames the table: a count, then each rank's record.
func encodeTable(t [][]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(t)))
	for i, r := range t {
		b = appendRecord(b, i, r)
	}
	return b
}

// decodeTable parses a table from rank 0: every record present, in rank
// order, within the bounds, and nothing after the last.
func decodeTable(b []byte) ([][]byte, error) {
	if len(b) < 4 {
		return nil, errors.New("short table")
	}
	n := binary.BigEndian.Uint32(b)
	if n < 1 || n > MaxSize {
		return nil, fmt.Errorf("table of %d ranks (1..%d)", n, MaxSize)
	}
	b = b[4:]
	t := make([][]byte, 0, min(int(n), len(b)/8+1))
	for i := 0; i < int(n); i++ {
		if len(b) < 8 {
			return nil, fmt.Errorf("table cut at rank %d of %d", i, n)
		}
		rank, l := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
		if int(rank) != i || l > MaxRecord || uint64(len(b)-8) < uint64(l) {
			return nil, fmt.Errorf("bad record %d of the table (rank %d, %d bytes)", i, rank, l)
		}
		t = append(t, b[8:8+l:8+l])
		b = b[8+l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after the table", len(b))
	}
	return t, nil
}
