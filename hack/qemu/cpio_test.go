package qemu

import (
	"bytes"
	"strconv"
	"testing"
)

// cpioEntry is one entry read back from a newc archive.
type cpioEntry struct {
	name         string
	mode         uint32
	data         []byte
	rmajor, rmin uint32
}

// readNewc parses a newc archive as the kernel's initramfs unpacker does,
// checking the magic and the 4-byte alignment of headers and data.
func readNewc(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header at %d field %d: %v", off, i, err)
		}
		return uint32(v)
	}
	for n := 0; n < 1000; n++ {
		if off%4 != 0 || off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at offset %d", off)
		}
		mode, size, rmaj, rmin, namesize := field(1), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+int(namesize)-1])
		if b[off+110+int(namesize)-1] != 0 {
			t.Fatalf("name %q not NUL-terminated", name)
		}
		data := (off + 110 + int(namesize) + 3) &^ 3
		if name == "TRAILER!!!" {
			return out
		}
		out = append(out, cpioEntry{name: name, mode: mode, data: b[data : data+int(size)], rmajor: rmaj, rmin: rmin})
		off = (data + int(size) + 3) &^ 3
	}
	t.Fatal("no trailer")
	return nil
}

func TestArchive(t *testing.T) {
	a := NewArchive()
	a.Dir("proc")
	if err := a.File("tests/vfio/testdata/sysfs.txt", []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.File("init", []byte("\x7fELF..."), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := a.CharDev("dev/console", 0o600, 5, 1); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "/", "../etc/passwd", "a/../../b"} {
		if err := a.File(bad, nil, 0o644); err == nil {
			t.Errorf("File(%q) accepted", bad)
		}
	}
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	got := readNewc(t, buf.Bytes())
	want := []struct {
		name string
		mode uint32
		data string
	}{
		{"dev", modeDir | 0o755, ""},
		{"dev/console", modeChr | 0o600, ""},
		{"init", modeFile | 0o755, "\x7fELF..."},
		{"proc", modeDir | 0o755, ""},
		{"tests", modeDir | 0o755, ""},
		{"tests/vfio", modeDir | 0o755, ""},
		{"tests/vfio/testdata", modeDir | 0o755, ""},
		{"tests/vfio/testdata/sysfs.txt", modeFile | 0o644, "hello"},
	}
	if len(got) != len(want) {
		t.Fatalf("archive has %d entries %v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.name != w.name || g.mode != w.mode || string(g.data) != w.data {
			t.Errorf("entry %d = %q mode %o %q, want %q mode %o %q", i, g.name, g.mode, g.data, w.name, w.mode, w.data)
		}
	}
	if c := got[1]; c.rmajor != 5 || c.rmin != 1 {
		t.Errorf("dev/console is %d:%d, want 5:1", c.rmajor, c.rmin)
	}
}
