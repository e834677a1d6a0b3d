package cache

import (
	"math/big"
	"regexp"
	"testing"
)

// sizeSyntax is the grammar of a sysfs cache size, for the oracle.
var sizeSyntax = regexp.MustCompile(`^([0-9]+)([KMG]?)$`)

// FuzzParseSize feeds parseSize what a (possibly broken) sysfs could hold.
// The oracle parses with a regular expression and arbitrary-precision
// arithmetic: parseSize must accept exactly the strings of the grammar whose
// value fits in an int64, and agree on the value.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"32768K", "8M", "1G", "512", "", "K", "-5K", "+5", "9223372036854775807K", "1.5M", " 8M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseSize(s)
		m := sizeSyntax.FindStringSubmatch(s)
		var want *big.Int
		if m != nil {
			want, _ = new(big.Int).SetString(m[1], 10)
			shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30}[m[2]]
			want.Lsh(want, shift)
			if !want.IsInt64() {
				want = nil
			}
		}
		switch {
		case want == nil && err == nil:
			t.Fatalf("parseSize(%q) = %d, want an error", s, got)
		case want != nil && err != nil:
			t.Fatalf("parseSize(%q): %v, want %v", s, err, want)
		case want != nil && got != want.Int64():
			t.Fatalf("parseSize(%q) = %d, want %v", s, got, want)
		}
	})
}
