package hugepage

import (
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
)

// live counts the Regions not yet closed, with where each was allocated.
var live struct {
	sync.Mutex
	seq     uint64
	regions map[*Region]liveRegion
}

type liveRegion struct {
	seq  uint64
	line string
}

// register counts r as live; who is the allocating caller, what (optional)
// what the memory is for.
func register(r *Region, who, what string) {
	line := describe(r.n, r.pageSize, r.source, r.degraded != "")
	if what != "" {
		line += " for " + what
	}
	line += ", allocated at " + who
	live.Lock()
	defer live.Unlock()
	if live.regions == nil {
		live.regions = make(map[*Region]liveRegion)
	}
	live.seq++
	live.regions[r] = liveRegion{seq: live.seq, line: line}
}

// unregister stops counting r.
func unregister(r *Region) {
	live.Lock()
	defer live.Unlock()
	delete(live.regions, r)
}

// Live is the number of Regions allocated and not yet closed, pools'
// included. Tests check it is zero at the end (see LiveRegions).
func Live() int {
	live.Lock()
	defer live.Unlock()
	return len(live.regions)
}

// LiveRegions describes every live Region, oldest first, one line each: its
// size, page size and source, and the file:line that allocated it, e.g.
// "4194304 bytes of memfd 2MiB pages, allocated at ioat/ring.go:88".
func LiveRegions() []string {
	live.Lock()
	all := make([]liveRegion, 0, len(live.regions))
	for _, l := range live.regions {
		all = append(all, l)
	}
	live.Unlock()
	slices.SortFunc(all, func(a, b liveRegion) int {
		if a.seq < b.seq {
			return -1
		}
		return 1
	})
	out := make([]string, len(all))
	for i, l := range all {
		out[i] = l.line
	}
	return out
}

// callerOf names the caller skip frames up (1 is callerOf's caller) as
// "dir/file.go:line".
func callerOf(skip int) string {
	_, file, line, ok := runtime.Caller(skip)
	if !ok {
		return "unknown caller"
	}
	return filepath.Join(filepath.Base(filepath.Dir(file)), filepath.Base(file)) + ":" + strconv.Itoa(line)
}
