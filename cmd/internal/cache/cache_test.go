package cache

import (
	"os"
	"path/filepath"
	"testing"
)

// A two-socket tree: L1d, L1i, L2 per CPU, one L3 per socket; the answer
// is the L3, twice.
func TestSysfs(t *testing.T) {
	root := t.TempDir()
	write := func(cpu, idx int, level, typ, size, shared string) {
		d := filepath.Join(root, "cpu"+string(rune('0'+cpu)), "cache", "index"+string(rune('0'+idx)))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"level": level, "type": typ, "size": size, "shared_cpu_list": shared} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for cpu := range 4 {
		write(cpu, 0, "1", "Data", "48K", string(rune('0'+cpu)))
		write(cpu, 1, "1", "Instruction", "32K", string(rune('0'+cpu)))
		write(cpu, 2, "2", "Unified", "2048K", string(rune('0'+cpu)))
		sock := "0-1"
		if cpu >= 2 {
			sock = "2-3"
		}
		write(cpu, 3, "3", "Unified", "30M", sock)
	}
	l, err := fromSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	if l.Level != 3 || l.Size != 30<<20 || l.Instances != 2 || l.Total != 60<<20 || l.Source != "sysfs" {
		t.Fatalf("got %+v, want L3 30 MiB x 2", l)
	}
	if got, want := l.String(), "L3 30 MiB x 2 = 60 MiB (sysfs)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if _, err := fromSysfs(t.TempDir()); err == nil {
		t.Error("an empty tree gave a cache")
	}
}

// The registers of a 32 MiB, 16-way L3 with 64-byte lines (the layout of
// the Intel SDM's CPUID leaf 4 table), and the end of the list.
func TestDecodeLeaf(t *testing.T) {
	sets := uint32(32<<20/(16*64)) - 1
	eax := uint32(3)<<5 | 3 // level 3, unified
	ebx := uint32(15)<<22 | 0<<12 | 63
	c, ok := decodeLeaf(eax, ebx, sets)
	if !ok || c.level != 3 || c.typ != 3 || c.size != 32<<20 {
		t.Fatalf("decoded %+v, want a 32 MiB unified L3", c)
	}
	if _, ok := decodeLeaf(0, ebx, sets); ok {
		t.Error("type 0 (end of list) decoded as a cache")
	}
	// A VM's AMD leaf 0x80000006: 1 MiB L2, 508 MiB L3.
	if l, err := fromAMDLeaf6(0x4006140, 0xfe09140); err != nil || l.Level != 3 || l.Size != 508<<20 {
		t.Errorf("fromAMDLeaf6 = %+v, %v; want a 508 MiB L3", l, err)
	}
	if l, err := fromAMDLeaf6(0x4006140, 0); err != nil || l.Level != 2 || l.Size != 1<<20 {
		t.Errorf("fromAMDLeaf6 without L3 = %+v, %v; want a 1 MiB L2", l, err)
	}
	l, ok := lastOf([]leafCache{{1, 1, 48 << 10}, {1, 2, 32 << 10}, {3, 3, 32 << 20}, {2, 3, 2 << 20}})
	if !ok || l.Level != 3 || l.Size != 32<<20 {
		t.Errorf("lastOf = %+v", l)
	}
}

// The machine running the test answers one way or the other with a
// plausible size (every CPU gomx runs on has at least 256 KiB of cache).
func TestLast(t *testing.T) {
	l, err := Last()
	if err != nil {
		t.Skipf("%v (a sandbox that hides both sysfs caches and CPUID)", err)
	}
	if l.Size < 256<<10 || l.Total < l.Size || l.Level < 1 {
		t.Errorf("implausible %+v", l)
	}
	t.Logf("%v", l)
}
