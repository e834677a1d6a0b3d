package shm

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Stale sockets. A process that dies without Close (SIGKILL, a crash)
// leaves its socket file in the endpoint directory: the kernel frees the
// socket, not the name. (Its rings and pools are memfds, which die with
// their last mapping, so sockets are all it leaves.) Every Open sweeps the
// directory first and removes the sockets nobody owns any more, so the
// directory does not fill up with the names of dead boards.
//
// A socket file is stale when no socket is bound to it: the kernel lists
// every bound unix socket of this network namespace, path included, in
// /proc/net/unix, so a name listed there is live (or being set up: bound,
// not listening yet) and is left alone without being disturbed. A name not
// listed may belong to a board in another network namespace that shares
// the directory; a connect tells: a live board accepts (the probe then
// closes at once, and that board counts one refused connection), a dead
// one refuses with ECONNREFUSED. Only then is the file removed, and only if
// it is still the file that was probed (same inode), since a board taking
// over the name may have replaced it meanwhile.

// sweepStale removes the stale sockets of dir (see above) and returns how
// many it removed. Errors only leave files in place.
func sweepStale(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var live map[string]bool
	removed := 0
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".sock") || ent.Type()&os.ModeSocket == 0 {
			continue
		}
		if live == nil {
			live = boundUnixPaths()
		}
		path := filepath.Join(dir, ent.Name())
		if live[path] {
			continue
		}
		var before unix.Stat_t
		if unix.Lstat(path, &before) != nil || int(before.Uid) != os.Getuid() {
			continue
		}
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err == nil {
			c.Close()
			continue
		}
		if !errors.Is(err, unix.ECONNREFUSED) {
			continue
		}
		var after unix.Stat_t
		if unix.Lstat(path, &after) != nil || after.Ino != before.Ino || after.Dev != before.Dev {
			continue
		}
		if os.Remove(path) == nil {
			removed++
		}
	}
	return removed
}

// boundUnixPaths returns the paths of the unix sockets bound in this
// network namespace (/proc/net/unix: the path is the eighth field, absent
// for unnamed sockets). Without /proc it returns an empty set, and the
// connect probe decides alone.
func boundUnixPaths() map[string]bool {
	m := map[string]bool{}
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return m
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for first := true; sc.Scan(); first = false {
		if first {
			continue // the header
		}
		f := strings.Fields(sc.Text())
		if len(f) >= 8 {
			m[f[7]] = true
		}
	}
	return m
}
