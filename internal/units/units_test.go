package units

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string // substring of the error, "" for success
	}{
		{"0", 0, ""},
		{"4096", 4096, ""},
		{"4096B", 4096, ""},
		{"4K", 4 << 10, ""},
		{"4k", 4 << 10, ""},
		{"4KiB", 4 << 10, ""},
		{"4kib", 4 << 10, ""},
		{"64K", 64 << 10, ""},
		{"1M", 1 << 20, ""},
		{"4MiB", 4 << 20, ""},
		{"1G", 1 << 30, ""},
		{"2GiB", 2 << 30, ""},
		{" 8M ", 8 << 20, ""},
		{"8 M", 8 << 20, ""},
		{"", 0, "bad size"},
		{"K", 0, "bad size"},
		{"-1", 0, "bad size"},
		{"+4K", 0, "bad size"},
		{"12Q", 0, `unknown suffix "Q"`},
		{"4KB", 0, "ambiguous"},
		{"4mb", 0, "ambiguous"},
		{"1.5M", 0, "fractions"},
		{"4T", 0, "unknown suffix"},
		{"0x10", 0, "unknown suffix"},
		{"9223372036854775807", 9223372036854775807, ""},
		{"9223372036854775808", 0, "too large"},
		{"8589934592G", 0, "too large"},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("Parse(%q): %v", tc.in, err)
		case tc.err != "" && err == nil:
			t.Errorf("Parse(%q) = %d, want an error containing %q", tc.in, got, tc.err)
		case tc.err != "" && !strings.Contains(err.Error(), tc.err):
			t.Errorf("Parse(%q): error %q does not contain %q", tc.in, err, tc.err)
		case tc.err == "" && got != tc.want:
			t.Errorf("Parse(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList("4K,64K,1M")
	if err != nil || len(got) != 3 || got[0] != 4<<10 || got[1] != 64<<10 || got[2] != 1<<20 {
		t.Errorf("ParseList(4K,64K,1M) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "4K,", ",4K", "4K,,8K", "4K,12Q"} {
		if v, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) = %v, want an error", bad, v)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {100, "100 B"}, {1024, "1 KiB"}, {1536, "1536 B"}, {12 << 10, "12 KiB"},
		{1536 << 10, "1536 KiB"}, {4 << 20, "4 MiB"}, {1 << 30, "1 GiB"}, {3 << 30, "3 GiB"},
	} {
		if got := Format(tc.n); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// FuzzParse checks that parseSize never panics, accepts only
// non-negative sizes, and that what it accepts prints back (formatSize) to
// a string it parses to the same value.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"4096", "4K", "64KiB", "1M", "8MiB", "1G", "12Q", "4KB", "", "1.5M", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "bad size") {
				t.Errorf("Parse(%q): error %q does not start with \"bad size\"", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("Parse(%q) = %d: negative", s, n)
		}
		back := strings.ReplaceAll(Format(n), " ", "")
		m, err := Parse(back)
		if err != nil || m != n {
			t.Fatalf("Parse(%q) = %d, formatSize gives %q, which parses to %d, %v", s, n, back, m, err)
		}
	})
}
