package launch

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// PMIAddr is the bootstrap address that makes Exchange trade records
// through the launcher's PMI-1 key-value space instead of a rank 0
// listener: MPICH's hydra gives each process a PMI connection (PMI_FD, an
// inherited socket, or PMI_PORT=host:port with PMI_ID), on any node, so a
// job of hydra needs neither GOMX_BOOTSTRAP nor a port of its own.
const PMIAddr = "pmi:"

// hasPMI reports whether the launcher handed this process a PMI-1
// connection.
func hasPMI(getenv func(string) string) bool {
	return getenv("PMI_FD") != "" || getenv("PMI_PORT") != ""
}

// pmiClient speaks PMI-1's wire protocol (MPICH's "simple PMI"; the Flux
// project's RFC 13 describes it): one command per line, "cmd=NAME k=v ...",
// each answered by one line.
type pmiClient struct {
	conn net.Conn
	r    *bufio.Reader
	stop func() bool // ends the context's hold on conn
}

func (p *pmiClient) close() {
	p.stop()
	p.conn.Close()
}

// openPMI connects to the launcher's PMI server.
func openPMI(ctx context.Context, getenv func(string) string) (*pmiClient, error) {
	var conn net.Conn
	if s := getenv("PMI_FD"); s != "" {
		fd, err := strconv.Atoi(s)
		if err != nil || fd < 0 {
			return nil, fmt.Errorf("launch: PMI_FD=%q is not a descriptor", s)
		}
		f := os.NewFile(uintptr(fd), "pmi")
		conn, err = net.FileConn(f) // a duplicate, with deadlines
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("launch: PMI_FD=%d: %w (was it inherited from the launcher?)", fd, err)
		}
	} else {
		addr := getenv("PMI_PORT")
		var d net.Dialer
		var err error
		if conn, err = d.DialContext(ctx, "tcp", addr); err != nil {
			return nil, fmt.Errorf("launch: PMI_PORT=%s: %w", addr, err)
		}
	}
	// The end of ctx closes the connection, and so ends any wait; the
	// error then names ctx's (pmiExchange), where a deadline on the
	// connection would race with it.
	p := &pmiClient{conn: conn, r: bufio.NewReader(conn), stop: context.AfterFunc(ctx, func() { conn.Close() })}
	if getenv("PMI_FD") == "" {
		// A PMI_PORT connection first says which process it is; the
		// server answers with an initack and three settings.
		if _, err := p.call("initack", "initack", "pmiid="+getenv("PMI_ID")); err != nil {
			p.close()
			return nil, err
		}
		for range 3 {
			if _, err := p.read("set"); err != nil {
				conn.Close()
				return nil, err
			}
		}
	}
	m, err := p.call("init", "response_to_init", "pmi_version=1", "pmi_subversion=1")
	if err != nil {
		p.close()
		return nil, err
	}
	if m["rc"] != "0" {
		p.close()
		return nil, fmt.Errorf("launch: PMI init: rc=%s (the launcher does not speak PMI-1)", m["rc"])
	}
	return p, nil
}

// call sends a command and returns the fields of its answer, which must
// be of the command want.
func (p *pmiClient) call(cmd, want string, args ...string) (map[string]string, error) {
	line := "cmd=" + cmd
	for _, a := range args {
		line += " " + a
	}
	if _, err := p.conn.Write([]byte(line + "\n")); err != nil {
		return nil, fmt.Errorf("launch: PMI %s: %w", cmd, err)
	}
	return p.read(want)
}

// read reads one answer line of the command want.
func (p *pmiClient) read(want string) (map[string]string, error) {
	line, err := p.r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("launch: PMI, waiting for %s: %w", want, err)
	}
	m := parsePMI(line)
	if m["cmd"] != want {
		return nil, fmt.Errorf("launch: PMI answered %q, want cmd=%s", strings.TrimSpace(line), want)
	}
	return m, nil
}

// parsePMI splits a PMI-1 line into its key=value fields.
func parsePMI(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

// recordErr refuses a record of more than MaxRecord bytes.
func recordErr(rec []byte) error {
	if len(rec) > MaxRecord {
		return fmt.Errorf("launch: record of %d bytes, at most %d", len(rec), MaxRecord)
	}
	return nil
}

// withCtxErr adds ctx's error to *err once ctx has ended: the end of ctx
// closes the connection to a launcher's server, and the read that fails
// then would not say why.
func withCtxErr(ctx context.Context, err *error) {
	if *err != nil && ctx.Err() != nil {
		*err = fmt.Errorf("%w (%w)", *err, ctx.Err())
	}
}

// pmiExchange is Exchange over PMI: every rank puts its record, hex
// encoded and cut to the server's largest value, under keys of its own,
// all meet at a barrier, then every rank gets every record.
func pmiExchange(ctx context.Context, job Job, mine []byte, getenv func(string) string) (_ [][]byte, err error) {
	if err := recordErr(mine); err != nil {
		return nil, err
	}
	defer withCtxErr(ctx, &err)
	p, err := openPMI(ctx, getenv)
	if err != nil {
		return nil, err
	}
	defer p.close()
	m, err := p.call("get_maxes", "maxes")
	if err != nil {
		return nil, err
	}
	vallen, _ := strconv.Atoi(m["vallen_max"])
	chunk := (vallen - 1) / 2 // bytes of record per value, hex encoded
	if chunk < 16 {
		return nil, fmt.Errorf("launch: PMI values of at most %q bytes: too small", m["vallen_max"])
	}
	if m, err = p.call("get_my_kvsname", "my_kvsname"); err != nil {
		return nil, err
	}
	kvs := m["kvsname"]
	put := func(key, value string) error {
		m, err := p.call("put", "put_result", "kvsname="+kvs, "key="+key, "value="+value)
		if err == nil && m["rc"] != "0" {
			err = fmt.Errorf("launch: PMI put %s: rc=%s %s", key, m["rc"], m["msg"])
		}
		return err
	}
	get := func(key string) (string, error) {
		m, err := p.call("get", "get_result", "kvsname="+kvs, "key="+key)
		if err == nil && m["rc"] != "0" {
			err = fmt.Errorf("launch: PMI get %s: rc=%s %s", key, m["rc"], m["msg"])
		}
		return m["value"], err
	}
	// A record of n bytes: "gomx-R" holds n, "gomx-R-I" its I'th piece.
	if err := put(fmt.Sprintf("gomx-%d", job.Rank), strconv.Itoa(len(mine))); err != nil {
		return nil, err
	}
	for i := 0; i*chunk < len(mine); i++ {
		if err := put(fmt.Sprintf("gomx-%d-%d", job.Rank, i), hex.EncodeToString(mine[i*chunk:min(len(mine), (i+1)*chunk)])); err != nil {
			return nil, err
		}
	}
	if _, err := p.call("barrier_in", "barrier_out"); err != nil {
		return nil, err
	}
	table := make([][]byte, job.Size)
	for r := range job.Size {
		v, err := get(fmt.Sprintf("gomx-%d", r))
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxRecord {
			return nil, fmt.Errorf("launch: PMI: rank %d's record has length %q", r, v)
		}
		rec := make([]byte, 0, n)
		for i := 0; len(rec) < n; i++ {
			v, err := get(fmt.Sprintf("gomx-%d-%d", r, i))
			if err != nil {
				return nil, err
			}
			b, err := hex.DecodeString(v)
			if err != nil || len(b) == 0 || len(rec)+len(b) > n {
				return nil, fmt.Errorf("launch: PMI: piece %d of rank %d's record is bad (%q)", i, r, v)
			}
			rec = append(rec, b...)
		}
		table[r] = rec
	}
	// Hydra counts a process that initialised PMI and left without
	// finalising as failed.
	if _, err := p.call("finalize", "finalize_ack"); err != nil {
		return nil, err
	}
	return table, nil
}
