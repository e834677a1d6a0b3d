// Package cache finds the size of the CPU's last-level cache, so that a
// benchmark that wants cold caches can rotate over more memory than the
// caches hold on the machine it runs on, not on a machine someone once had.
//
// The kernel's account comes first: /sys/devices/system/cpu/cpu*/cache/
// index*/ lists every cache with its level, type, size and the CPUs that
// share it, so the last level's instances can be counted and summed. Some
// kernels and most sandboxes do not publish it; then the CPU itself is
// asked with CPUID (the deterministic cache parameters of leaf 4 on Intel,
// 0x8000001D on AMD, or AMD's older L2/L3 leaf 0x80000006 when a hypervisor
// hides the former), which gives the size of one instance of each level
// but not how many there are.
package cache

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// LLC describes the last-level cache.
type LLC struct {
	// Level is the cache level (3 on most servers).
	Level int
	// Size is the bytes of one instance.
	Size int64
	// Instances is how many separate instances the machine has (one per
	// socket or per core complex); 1 when unknown.
	Instances int
	// Total is Size x Instances: what all of them hold together.
	Total int64
	// Source says where the figures came from: "sysfs" or "cpuid".
	Source string
}

// String describes the cache in a header: "L3 32 MiB x 2 = 64 MiB (sysfs)".
func (l LLC) String() string {
	if l.Instances > 1 {
		return fmt.Sprintf("L%d %s x %d = %s (%s)", l.Level, format(l.Size), l.Instances, format(l.Total), l.Source)
	}
	return fmt.Sprintf("L%d %s (%s)", l.Level, format(l.Size), l.Source)
}

// format writes bytes in the largest binary unit that divides them, or
// KiB.
func format(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// Last returns the last-level cache, from sysfs when the kernel publishes
// the caches there, else from CPUID. It returns an error saying what was
// tried when neither answers.
func Last() (LLC, error) {
	l, serr := fromSysfs("/sys/devices/system/cpu")
	if serr == nil {
		return l, nil
	}
	l, cerr := fromCPUID()
	if cerr == nil {
		return l, nil
	}
	return LLC{}, fmt.Errorf("cannot tell the last-level cache: sysfs: %v; cpuid: %v", serr, cerr)
}

// fromSysfs reads the caches under root (/sys/devices/system/cpu).
func fromSysfs(root string) (LLC, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "cpu[0-9]*", "cache", "index[0-9]*"))
	if err != nil || len(dirs) == 0 {
		return LLC{}, fmt.Errorf("no cache directories in %s", root)
	}
	best := LLC{Source: "sysfs"}
	shared := map[string]bool{} // shared_cpu_list of each LLC instance
	for _, d := range dirs {
		typ := readString(filepath.Join(d, "type"))
		if typ != "Unified" && typ != "Data" {
			continue
		}
		level, err := strconv.Atoi(readString(filepath.Join(d, "level")))
		if err != nil {
			continue
		}
		size, err := parseSize(readString(filepath.Join(d, "size")))
		if err != nil || size <= 0 {
			continue
		}
		if level > best.Level {
			best.Level, best.Size = level, size
			shared = map[string]bool{}
		}
		if level == best.Level {
			best.Size = max(best.Size, size)
			shared[readString(filepath.Join(d, "shared_cpu_list"))] = true
		}
	}
	if best.Level == 0 {
		return LLC{}, fmt.Errorf("no readable data or unified cache in %s", root)
	}
	best.Instances = max(1, len(shared))
	best.Total = best.Size * int64(best.Instances)
	return best, nil
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// parseSize parses sysfs cache sizes: decimal digits with an optional K, M
// or G suffix ("32768K", "8M", "512"). Anything else, and sizes that do not
// fit in an int64, are errors.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("cache size %q: want decimal digits and an optional K, M or G", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("cache size %s x %d does not fit in 64 bits", s, mult)
	}
	return n * mult, nil
}

// leafCache is one cache of the CPUID deterministic cache parameters.
type leafCache struct {
	level, typ int // type 1 data, 2 instruction, 3 unified
	size       int64
}

// decodeLeaf decodes the registers of one subleaf of CPUID leaf 4 or
// 0x8000001D: type in EAX[4:0] (0 ends the list), level in EAX[7:5]; size =
// ways x partitions x line size x sets, each field stored minus one in
// EBX[31:22], EBX[21:12], EBX[11:0] and ECX.
func decodeLeaf(eax, ebx, ecx uint32) (leafCache, bool) {
	typ := int(eax & 0x1F)
	if typ == 0 {
		return leafCache{}, false
	}
	ways := int64(ebx>>22) + 1
	parts := int64(ebx>>12&0x3FF) + 1
	line := int64(ebx&0xFFF) + 1
	sets := int64(ecx) + 1
	return leafCache{level: int(eax >> 5 & 7), typ: typ, size: ways * parts * line * sets}, true
}

// fromAMDLeaf6 decodes AMD's CPUID 0x80000006: the L3 size in 512 KiB
// units in EDX[31:18], the L2 size in KiB in ECX[31:16].
func fromAMDLeaf6(ecx, edx uint32) (LLC, error) {
	if l3 := int64(edx>>18) * 512 << 10; l3 > 0 {
		return LLC{Level: 3, Size: l3, Instances: 1, Total: l3, Source: "cpuid"}, nil
	}
	if l2 := int64(ecx>>16) << 10; l2 > 0 {
		return LLC{Level: 2, Size: l2, Instances: 1, Total: l2, Source: "cpuid"}, nil
	}
	return LLC{}, fmt.Errorf("CPUID 0x80000006 reports no L2 or L3")
}

// lastOf picks the last level's data or unified cache of a CPUID list.
func lastOf(caches []leafCache) (LLC, bool) {
	sort.Slice(caches, func(i, j int) bool { return caches[i].level < caches[j].level })
	for i := len(caches) - 1; i >= 0; i-- {
		if c := caches[i]; c.typ != 2 && c.size > 0 {
			return LLC{Level: c.level, Size: c.size, Instances: 1, Total: c.size, Source: "cpuid"}, true
		}
	}
	return LLC{}, false
}
