package launch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// PMIxAddr is the bootstrap address that makes Exchange trade records
// through the PMIx server of the launcher's local daemon instead of a
// rank 0 listener: Open MPI's mpirun (4.x: its orted on every node) gives
// each rank one (PMIX_SERVER_URI41 and its elders, PMIX_NAMESPACE,
// PMIX_RANK), on any node, so a job across nodes needs neither
// GOMX_BOOTSTRAP nor a port of its own.
//
// Exchange there does what MPI libraries do with their business cards:
// each rank commits its record under a key of its own, all meet at a
// fence that collects the job's data into every daemon, then each rank
// gets every other rank's record from its daemon. The client (pmix.go,
// pmixwire.go) speaks only those commands, over PMIx's TCP transport, in
// the wire format of OpenPMIx 4.1 and later (PMIX_SERVER_URI41) with its
// default integer encoding; an older server is refused with the way around.
const PMIxAddr = "pmix:"

// pmixURIVars are the variables a PMIx server names itself in, the
// newest protocol first.
var pmixURIVars = []string{"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"}

// pmixURI returns the variable that names the local PMIx server, and its
// value ("" when the launcher gave none).
func pmixURI(getenv func(string) string) (name, value string) {
	for _, n := range pmixURIVars {
		if v := getenv(n); v != "" {
			return n, v
		}
	}
	return "", ""
}

// hasPMIx reports whether the launcher gave this process a PMIx server
// to connect to, and its name in it.
func hasPMIx(getenv func(string) string) bool {
	_, uri := pmixURI(getenv)
	return uri != "" && getenv("PMIX_NAMESPACE") != "" && getenv("PMIX_RANK") != ""
}

// pmixServerAddr parses a server URI, "NSPACE.RANK;tcp4://IP:PORT" (or
// tcp6://[IP]:PORT), into the TCP address to dial.
func pmixServerAddr(uri string) (string, error) {
	_, addr, ok := strings.Cut(uri, ";")
	if !ok || strings.Contains(addr, ";") {
		return "", fmt.Errorf("%q is not NSPACE.RANK;tcp4://IP:PORT", uri)
	}
	for _, p := range []string{"tcp4://", "tcp6://"} {
		if a, ok := strings.CutPrefix(addr, p); ok {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return "", fmt.Errorf("%q: %v", uri, err)
			}
			return a, nil
		}
	}
	return "", fmt.Errorf("%q: a transport other than tcp4:// or tcp6://, which this client does not speak", uri)
}

// The handshake names this client as OpenPMIx 4.2 would name itself: a
// plain client (flag 0) with the "native" security module, which over
// TCP sends the effective uid and gid as its credential, the "v41"
// buffer operations on undescribed buffers, and the "hash" data store,
// so that the server sends the data a get asks for in its answer
// rather than into a shared-memory store.
const (
	pmixVersion      = "4.2.2"
	pmixPSec         = "native"
	pmixBfrops       = "v41"
	pmixGDS          = "hash"
	pmixSimpleClient = 0
	pmixReadyForHS   = -14 // PMIX_ERR_READY_FOR_HANDSHAKE
	pmixHeaderBytes  = 16  // pmix_ptl_hdr_t: pindex, tag, nbytes, padding
	pmixFirstTag     = 100 // PMIX_PTL_TAG_DYNAMIC
	pmixMaxAnswer    = 64 << 20
	pmixRecordKey    = "gomx.record"
	pmixCollectData  = "pmix.collect" // PMIX_COLLECT_DATA
)

// pmixBypass is the way around a PMIx server this client cannot use.
const pmixBypass = "to go around it, export GOMX_BOOTSTRAP=host:port, an address of rank 0's host every rank reaches (mpirun -x GOMX_BOOTSTRAP passes it on)"

// pmixClient is a connection to the local PMIx server.
type pmixClient struct {
	conn   net.Conn
	nspace string
	rank   uint32
	index  uint32 // this client's place in the server's table
	tag    uint32
	stop   func() bool
}

func (c *pmixClient) close() {
	c.stop()
	c.conn.Close()
}

// pmixHandshake returns the message a client opens its connection with:
// a header in the host's byte order (the server is on this host) whose
// only meaningful field is the length, then the client's identity.
func pmixHandshake(nspace string, rank, uid, gid uint32) []byte {
	var body []byte
	body = append(append(body, pmixPSec...), 0)
	body = binary.BigEndian.AppendUint32(body, 8) // the credential's length
	body = binary.NativeEndian.AppendUint32(body, uid)
	body = binary.NativeEndian.AppendUint32(body, gid)
	body = append(body, pmixSimpleClient)
	body = append(append(body, nspace...), 0)
	body = binary.BigEndian.AppendUint32(body, rank)
	body = append(append(body, pmixVersion...), 0)
	body = append(append(body, pmixBfrops...), 0)
	body = append(body, pmixNonDesc)
	body = append(append(body, pmixGDS...), 0)
	h := make([]byte, 0, pmixHeaderBytes+len(body))
	h = binary.NativeEndian.AppendUint32(h, ^uint32(0)) // pindex -1: not yet known
	h = binary.NativeEndian.AppendUint32(h, ^uint32(0)) // tag: none
	h = binary.NativeEndian.AppendUint32(h, uint32(len(body)))
	h = binary.NativeEndian.AppendUint32(h, 0)
	return append(h, body...)
}

// openPMIx connects to the local PMIx server as this process.
func openPMIx(ctx context.Context, getenv func(string) string) (*pmixClient, error) {
	name, uri := pmixURI(getenv)
	if name != pmixURIVars[0] {
		// PMIX_SERVER_URI41 comes with the v41 buffer format (OpenPMIx
		// 4.1 on); an older server names only the protocols before it.
		return nil, fmt.Errorf("launch: the launcher's PMIx server predates PMIx 4.1 (%s, no %s), whose format this client speaks (%s)", name, pmixURIVars[0], pmixBypass)
	}
	addr, err := pmixServerAddr(uri)
	if err != nil {
		return nil, fmt.Errorf("launch: %s: %w", name, err)
	}
	nspace := getenv("PMIX_NAMESPACE")
	rank, err := strconv.ParseUint(getenv("PMIX_RANK"), 10, 32)
	if err != nil || nspace == "" || len(nspace) > 255 {
		return nil, fmt.Errorf("launch: PMIX_NAMESPACE=%q PMIX_RANK=%q: not a PMIx process name", nspace, getenv("PMIX_RANK"))
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("launch: the PMIx server at %s=%s: %w (%s)", name, uri, err, pmixBypass)
	}
	c := &pmixClient{conn: conn, nspace: nspace, rank: uint32(rank), tag: pmixFirstTag,
		stop: context.AfterFunc(ctx, func() { conn.Close() })}
	hs := pmixHandshake(nspace, uint32(rank), uint32(os.Geteuid()), uint32(os.Getegid()))
	var st [8]byte
	if _, err = conn.Write(hs); err == nil {
		_, err = io.ReadFull(conn, st[:4])
	}
	if err == nil {
		switch s := int32(binary.BigEndian.Uint32(st[:4])); s {
		case 0:
			_, err = io.ReadFull(conn, st[4:])
			c.index = binary.BigEndian.Uint32(st[4:])
		case pmixReadyForHS:
			err = errors.New("the server asks for a security handshake this client does not speak (a security module other than native?)")
		default:
			err = &pmixError{op: "connect", status: s}
		}
	}
	if err != nil {
		c.close()
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			err = fmt.Errorf("the server closed the connection: it does not know %s.%d, or refused uid %d", nspace, rank, os.Geteuid())
		}
		return nil, fmt.Errorf("launch: PMIx handshake with %s: %w (%s)", addr, err, pmixBypass)
	}
	return c, nil
}

// call sends one command and returns the server's answer to it, skipping
// any message of another tag (events this client did not ask for).
func (c *pmixClient) call(op string, msg []byte) ([]byte, error) {
	c.tag++
	h := make([]byte, 0, pmixHeaderBytes+len(msg))
	h = binary.BigEndian.AppendUint32(h, c.index)
	h = binary.BigEndian.AppendUint32(h, c.tag)
	h = binary.BigEndian.AppendUint32(h, uint32(len(msg)))
	h = binary.BigEndian.AppendUint32(h, 0)
	if _, err := c.conn.Write(append(h, msg...)); err != nil {
		return nil, fmt.Errorf("launch: PMIx %s: %w", op, err)
	}
	for {
		var hdr [pmixHeaderBytes]byte
		if _, err := io.ReadFull(c.conn, hdr[:]); err != nil {
			return nil, fmt.Errorf("launch: PMIx %s, waiting for the answer: %w", op, err)
		}
		n := binary.BigEndian.Uint32(hdr[8:])
		if n > pmixMaxAnswer {
			return nil, fmt.Errorf("launch: PMIx %s: an answer of %d bytes, at most %d", op, n, pmixMaxAnswer)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c.conn, body); err != nil {
			return nil, fmt.Errorf("launch: PMIx %s, reading the answer: %w", op, err)
		}
		if binary.BigEndian.Uint32(hdr[4:]) == c.tag {
			return body, nil
		}
	}
}

// callStatus sends one command whose answer is a status.
func (c *pmixClient) callStatus(op string, msg []byte) error {
	a, err := c.call(op, msg)
	if err != nil {
		return err
	}
	u := pmixUnpacker{a}
	st, err := u.status()
	if err != nil {
		return fmt.Errorf("launch: PMIx %s answer: %w", op, err)
	}
	if st != 0 {
		return fmt.Errorf("launch: %w", &pmixError{op: op, status: st})
	}
	return nil
}

// commitMsg publishes rec under key, to every process of the job.
func commitMsg(key string, rec []byte) []byte {
	var p pmixPacker
	p.byte1(pmixCmdCommit)
	p.byte1(pmixGlobal)
	p.buffer(appendByteObjectKval(nil, key, rec))
	return p.b
}

// fenceMsg waits for every process of nspace and collects their
// committed data into every server.
func fenceMsg(nspace string) []byte {
	var p pmixPacker
	p.byte1(pmixCmdFence)
	p.size(1)
	p.proc(nspace, pmixRankWildcard)
	p.size(1)
	p.boolInfo(pmixCollectData, true)
	return p.b
}

// getMsg asks for key of process rank of nspace.
func getMsg(nspace string, rank uint32, key string) []byte {
	var p pmixPacker
	p.byte1(pmixCmdGet)
	p.string(nspace)
	p.rank(rank)
	p.size(0) // no info
	p.string(key)
	return p.b
}

// finalizeMsg says this client is done: Open MPI counts a process that
// connected and left without it as failed.
func finalizeMsg() []byte {
	var p pmixPacker
	p.byte1(pmixCmdFinalize)
	return p.b
}

// pmixExchange is Exchange through the local PMIx server (PMIxAddr).
func pmixExchange(ctx context.Context, job Job, mine []byte, getenv func(string) string) (_ [][]byte, err error) {
	if err := recordErr(mine); err != nil {
		return nil, err
	}
	defer withCtxErr(ctx, &err)
	c, err := openPMIx(ctx, getenv)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if int(c.rank) != job.Rank {
		return nil, fmt.Errorf("launch: PMIX_RANK=%d but the launcher says rank %d", c.rank, job.Rank)
	}
	if err := c.callStatus("commit", commitMsg(pmixRecordKey, mine)); err != nil {
		return nil, err
	}
	if err := c.callStatus("fence", fenceMsg(c.nspace)); err != nil {
		return nil, err
	}
	table := make([][]byte, job.Size)
	for r := range job.Size {
		if r == job.Rank {
			table[r] = mine
			continue
		}
		a, err := c.call("get", getMsg(c.nspace, uint32(r), pmixRecordKey))
		if err != nil {
			return nil, err
		}
		rec, err := pmixRecord(a, uint32(r), pmixRecordKey)
		if err != nil {
			return nil, fmt.Errorf("launch: rank %d's record: %w", r, err)
		}
		if len(rec) > MaxRecord {
			return nil, fmt.Errorf("launch: rank %d's record has %d bytes, at most %d", r, len(rec), MaxRecord)
		}
		table[r] = rec
	}
	if err := c.callStatus("finalize", finalizeMsg()); err != nil {
		return nil, err
	}
	return table, nil
}
