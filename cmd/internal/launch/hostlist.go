package launch

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Slurm names the nodes of a job or step in its compressed hostlist
// syntax (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST): comma-separated
// items, each a host name in which bracketed groups stand for numbers,
// as in "node[01-04,07],gpu3" (node01 node02 node03 node04 node07 gpu3).
// A group is a comma-separated list of numbers and low-high ranges; a
// number written with leading zeros sets the width every number of its
// range is printed with ("[08-11]" is 08 09 10 11). An item with several
// groups ("r[1-2]n[1-2]") stands for every combination, the last group
// varying fastest, as `scontrol show hostnames` prints them.

// MaxHosts bounds the hosts ExpandHostlist returns (a job's nodes; the
// bound keeps a malformed "n[0-999999999]" from exhausting memory).
const MaxHosts = MaxSize

// hostItem is one parsed item of a hostlist: literal text and groups,
// alternating, starting and ending with (possibly empty) literal text.
type hostItem struct {
	lits   []string // len(groups)+1 literal pieces
	groups [][]hostRange
}

// hostRange is low..high printed with at least width digits.
type hostRange struct {
	lo, hi uint64
	width  int
}

func (r hostRange) count() uint64 { return r.hi - r.lo + 1 }

func (r hostRange) format(i uint64) string {
	s := strconv.FormatUint(r.lo+i, 10)
	if len(s) < r.width {
		s = strings.Repeat("0", r.width-len(s)) + s
	}
	return s
}

// groupCount is how many numbers a group stands for.
func groupCount(g []hostRange) uint64 {
	var n uint64
	for _, r := range g {
		n += r.count()
	}
	return n
}

// groupAt is a group's i'th number.
func groupAt(g []hostRange, i uint64) string {
	for _, r := range g {
		if i < r.count() {
			return r.format(i)
		}
		i -= r.count()
	}
	panic("launch: group index out of range")
}

// parseHostlist splits a hostlist into items, checking its syntax and
// that it names between 1 and MaxHosts hosts.
func parseHostlist(s string) ([]hostItem, error) {
	bad := func(why string) error {
		return fmt.Errorf("launch: hostlist %q: %s (want Slurm's syntax, e.g. node[01-04,07],gpu3)", s, why)
	}
	if s == "" {
		return nil, bad("empty")
	}
	var items []hostItem
	var total uint64
	for rest := s; ; {
		// An item ends at the first comma outside brackets.
		end, depth := len(rest), 0
		for i := 0; i < len(rest) && end == len(rest); i++ {
			switch rest[i] {
			case '[':
				depth++
			case ']':
				depth--
			case ',':
				if depth == 0 {
					end = i
				}
			}
		}
		it, err := parseHostItem(rest[:end])
		if err != nil {
			return nil, bad(err.Error())
		}
		n := uint64(1)
		for _, g := range it.groups {
			n *= groupCount(g)
			if n > MaxHosts {
				break
			}
		}
		if total += n; n > MaxHosts || total > MaxHosts {
			return nil, bad(fmt.Sprintf("more than %d hosts", MaxHosts))
		}
		items = append(items, it)
		if end == len(rest) {
			return items, nil
		}
		rest = rest[end+1:]
	}
}

// parseHostItem parses one item: a host name with bracketed groups.
func parseHostItem(s string) (hostItem, error) {
	var it hostItem
	if s == "" {
		return it, errors.New("an empty host name")
	}
	for {
		open := strings.IndexAny(s, "[]")
		if open < 0 {
			it.lits = append(it.lits, s)
			break
		}
		if s[open] == ']' {
			return it, errors.New("a ']' without its '['")
		}
		it.lits = append(it.lits, s[:open])
		closing := strings.IndexAny(s[open+1:], "[]")
		if closing < 0 || s[open+1+closing] == '[' {
			return it, errors.New("a '[' without its ']'")
		}
		g, err := parseGroup(s[open+1 : open+1+closing])
		if err != nil {
			return it, err
		}
		it.groups = append(it.groups, g)
		s = s[open+1+closing+1:]
	}
	for _, l := range it.lits {
		if strings.ContainsAny(l, " \t\n") {
			return it, fmt.Errorf("white space in host name %q", l)
		}
	}
	return it, nil
}

// parseGroup parses the inside of brackets: "01-04,07".
func parseGroup(s string) ([]hostRange, error) {
	var g []hostRange
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		l, err1 := parseHostNum(lo)
		h, err2 := parseHostNum(hi)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("[%s]: %q is not a number or a low-high range", s, part)
		}
		if h < l {
			return nil, fmt.Errorf("[%s]: range %q runs backwards", s, part)
		}
		if h-l >= MaxHosts {
			return nil, fmt.Errorf("[%s]: range %q has more than %d hosts", s, part, MaxHosts)
		}
		g = append(g, hostRange{lo: l, hi: h, width: len(lo)})
	}
	return g, nil
}

// parseHostNum parses the decimal digits of one bound (at most 18, so
// sums stay far from overflow).
func parseHostNum(s string) (uint64, error) {
	if s == "" || len(s) > 18 {
		return 0, errors.New("bad number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("bad number")
		}
	}
	return strconv.ParseUint(s, 10, 64)
}

// ExpandHostlist returns the hosts a Slurm hostlist names, in order,
// duplicates kept (see the syntax above); an error names the fault.
func ExpandHostlist(s string) ([]string, error) {
	items, err := parseHostlist(s)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range items {
		out = it.appendHosts(out)
	}
	return out, nil
}

// appendHosts appends every host of the item, the last group fastest.
func (it hostItem) appendHosts(out []string) []string {
	idx := make([]uint64, len(it.groups))
	var b strings.Builder
	for {
		b.Reset()
		for k, g := range it.groups {
			b.WriteString(it.lits[k])
			b.WriteString(groupAt(g, idx[k]))
		}
		b.WriteString(it.lits[len(it.groups)])
		out = append(out, b.String())
		k := len(idx) - 1
		for ; k >= 0; k-- {
			if idx[k]++; idx[k] < groupCount(it.groups[k]) {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return out
		}
	}
}

// NthHost returns the n'th host (from 0) of a Slurm hostlist without
// expanding the rest.
func NthHost(s string, n int) (string, error) {
	items, err := parseHostlist(s)
	if err != nil {
		return "", err
	}
	if n < 0 {
		return "", fmt.Errorf("launch: host %d of hostlist %q", n, s)
	}
	left := uint64(n)
	for _, it := range items {
		count := uint64(1)
		for _, g := range it.groups {
			count *= groupCount(g)
		}
		if left >= count {
			left -= count
			continue
		}
		// Mixed-radix digits of left, the last group least significant.
		digits := make([]string, len(it.groups))
		for k := len(it.groups) - 1; k >= 0; k-- {
			c := groupCount(it.groups[k])
			digits[k] = groupAt(it.groups[k], left%c)
			left /= c
		}
		var b strings.Builder
		for k, d := range digits {
			b.WriteString(it.lits[k])
			b.WriteString(d)
		}
		b.WriteString(it.lits[len(it.groups)])
		return b.String(), nil
	}
	return "", fmt.Errorf("launch: hostlist %q names fewer than %d hosts", s, n+1)
}
