// Package units parses and prints byte sizes the way gomx's command-line
// tools accept them: a decimal number with an optional binary suffix (K, M,
// G, or KiB, MiB, GiB), and comma-separated lists of them. The decimal
// spellings KB, MB and GB are refused as ambiguous rather than guessed.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeSuffixes maps the accepted suffixes (lower case) to their
// multipliers. K, M and G are binary, like their KiB, MiB and GiB
// spellings: a copy size is naturally a power of two.
var sizeSuffixes = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gib": 1 << 30,
}

// sizeHelp is the grammar of a size, quoted in errors.
const sizeHelp = "want bytes with an optional K, M or G suffix (or KiB, MiB, GiB; powers of 1024), e.g. 4096, 64K, 4MiB"

// Parse parses a size in bytes: a decimal number with an optional
// suffix K, M, G, KiB, MiB, GiB or B, in any case. "4K" and "4KiB" are
// both 4096. KB, MB and GB are refused as ambiguous (decimal or binary?).
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	digits, suffix := t[:i], strings.TrimSpace(t[i:])
	if digits == "" {
		return 0, fmt.Errorf("bad size %q: %s", s, sizeHelp)
	}
	mult, ok := sizeSuffixes[strings.ToLower(suffix)]
	if !ok {
		switch strings.ToLower(suffix) {
		case "kb", "mb", "gb":
			return 0, fmt.Errorf("bad size %q: %s is ambiguous: write %s (x1024) or the number of bytes",
				s, suffix, strings.ToUpper(suffix[:1]))
		}
		if strings.HasPrefix(suffix, ".") {
			return 0, fmt.Errorf("bad size %q: fractions are not accepted: %s", s, sizeHelp)
		}
		return 0, fmt.Errorf("bad size %q: unknown suffix %q: %s", s, suffix, sizeHelp)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return n * mult, nil
}

// ParseList parses a comma-separated list of sizes ("4K,64K,1M").
func ParseList(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			return nil, fmt.Errorf("bad size list %q: empty element (want e.g. 4K,64K,1M)", s)
		}
		n, err := Parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// Format prints n in the largest binary unit that divides it exactly:
// "4 KiB", "1536 KiB", "8 MiB", "100 B".
func Format(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// Size is a flag.Value holding a size parsed by Parse. N is the value and
// Set reports whether the flag was given on the command line.
type Size struct {
	N     int64
	IsSet bool
}

// String implements flag.Value.
func (f *Size) String() string {
	if f == nil {
		return ""
	}
	return Format(f.N)
}

// Placeholder names the flag's argument in help: SIZE.
func (f *Size) Placeholder() string { return "SIZE" }

// Set implements flag.Value.
func (f *Size) Set(s string) error {
	n, err := Parse(s)
	if err != nil {
		return err
	}
	f.N, f.IsSet = n, true
	return nil
}

// List is a flag.Value holding a list of sizes parsed by ParseList. V is
// the value (a default may be preset) and IsSet reports whether the flag was
// given on the command line.
type List struct {
	V     []int64
	IsSet bool
}

// String implements flag.Value.
func (f *List) String() string {
	if f == nil {
		return ""
	}
	var parts []string
	for _, n := range f.V {
		parts = append(parts, strings.ReplaceAll(strings.TrimSuffix(Format(n), "iB"), " ", ""))
	}
	return strings.Join(parts, ",")
}

// Placeholder names the flag's argument in help: LIST.
func (f *List) Placeholder() string { return "LIST" }

// Set implements flag.Value.
func (f *List) Set(s string) error {
	v, err := ParseList(s)
	if err != nil {
		return err
	}
	f.V, f.IsSet = v, true
	return nil
}
