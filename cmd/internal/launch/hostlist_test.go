package launch

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: hosts joined by spaces
	}{
		{"node01", "node01"},
		{"node[01-04,07],gpu3", "node01 node02 node03 node04 node07 gpu3"},
		{"n[8-11]", "n8 n9 n10 n11"},
		{"n[08-11]", "n08 n09 n10 n11"},
		{"n[098-101]", "n098 n099 n100 n101"},
		{"r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2"},
		{"rack[2]-node[1,3]-ib", "rack2-node1-ib rack2-node3-ib"},
		{"10.77.0.[1-2],10.78.0.1", "10.77.0.1 10.77.0.2 10.78.0.1"},
		{"[1-3]", "1 2 3"},
		{"a,a", "a a"},
	} {
		got, err := ExpandHostlist(c.in)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("ExpandHostlist(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		for i, h := range got {
			if n, err := NthHost(c.in, i); err != nil || n != h {
				t.Errorf("NthHost(%q, %d) = %q, %v; want %q", c.in, i, n, err, h)
			}
		}
		if _, err := NthHost(c.in, len(got)); err == nil {
			t.Errorf("NthHost(%q, %d) past the end: no error", c.in, len(got))
		}
	}
	for _, c := range []struct{ in, why string }{
		{"", "empty"},
		{"a,,b", "empty host"},
		{"node[1-3", "without its ']'"},
		{"node1-3]", "without its '['"},
		{"node[[1]]", "without its ']'"},
		{"node[3-1]", "backwards"},
		{"node[a-b]", "not a number"},
		{"node[]", "not a number"},
		{"node[1-]", "not a number"},
		{"node[0-999999999]", "more than"},
		{"a[0-999]b[0-999]", "more than"},
		{"node 1", "white space"},
	} {
		_, err := ExpandHostlist(c.in)
		if err == nil || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "node[01-04,07]") {
			t.Errorf("ExpandHostlist(%q): %v, want an error saying %q and showing the syntax", c.in, err, c.why)
		}
	}
}

// expandOracle expands a hostlist by rewriting strings: split at commas
// outside brackets, then replace the first bracket group of a name by each
// of its numbers in turn and recurse. It shares no code with the parser;
// ok is false where it finds the syntax broken.
func expandOracle(s string) (out []string, ok bool) {
	if s == "" {
		return nil, false
	}
	depth, start := 0, 0
	var names []string
	for i, ch := range s {
		switch ch {
		case '[':
			depth++
			if depth > 1 {
				return nil, false
			}
		case ']':
			depth--
			if depth < 0 {
				return nil, false
			}
		case ',':
			if depth == 0 {
				names = append(names, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, false
	}
	names = append(names, s[start:])
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, " \t\n") {
			return nil, false
		}
		hosts, ok := expandName(n)
		if !ok {
			return nil, false
		}
		out = append(out, hosts...)
		if len(out) > MaxHosts {
			return nil, false
		}
	}
	return out, true
}

func expandName(n string) ([]string, bool) {
	i := strings.IndexByte(n, '[')
	if i < 0 {
		return []string{n}, true
	}
	j := i + strings.IndexByte(n[i:], ']')
	var nums []string
	for _, p := range strings.Split(n[i+1:j], ",") {
		lo, hi, _ := strings.Cut(p, "-")
		if !strings.Contains(p, "-") {
			hi = lo
		}
		if !digits(lo) || !digits(hi) || len(lo) > 18 || len(hi) > 18 {
			return nil, false
		}
		l, _ := strconv.ParseUint(lo, 10, 64)
		h, _ := strconv.ParseUint(hi, 10, 64)
		if h < l || h-l > MaxHosts {
			return nil, false
		}
		for v := l; v <= h; v++ {
			nums = append(nums, fmt.Sprintf("%0*d", len(lo), v))
			if len(nums) > MaxHosts {
				return nil, false
			}
		}
	}
	var out []string
	for _, num := range nums {
		rest, ok := expandName(n[:i] + num + n[j+1:])
		if !ok {
			return nil, false
		}
		out = append(out, rest...)
		if len(out) > MaxHosts {
			return nil, false
		}
	}
	return out, true
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// FuzzExpandHostlist: the parser and the rewriting oracle accept the same
// hostlists and expand them to the same hosts, and NthHost agrees with
// the expansion. Inputs that would expand to thousands of hosts are
// skipped so the oracle stays quick.
func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[01-04,07],gpu3", "r[1-2]n[1-2]", "n[098-101]", "10.77.0.[1-2]", "a[1-3", "a]", "x[2-1]", "[0-9]", "a,,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 64 || strings.Count(s, "-") > 6 {
			return
		}
		for _, r := range strings.Split(s, "-") {
			// a range bound of more than three digits: too many hosts for a quick oracle
			if n := len(r) - len(strings.TrimLeft(r, "0123456789")); n > 3 {
				return
			}
		}
		got, err := ExpandHostlist(s)
		want, ok := expandOracle(s)
		if (err == nil) != ok {
			t.Fatalf("ExpandHostlist(%q): %v; oracle accepts: %v", s, err, ok)
		}
		if !ok {
			return
		}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("ExpandHostlist(%q) = %q, oracle %q", s, got, want)
		}
		for _, i := range []int{0, len(got) / 2, len(got) - 1} {
			if h, err := NthHost(s, i); err != nil || h != got[i] {
				t.Fatalf("NthHost(%q, %d) = %q, %v; want %q", s, i, h, err, got[i])
			}
		}
	})
}
