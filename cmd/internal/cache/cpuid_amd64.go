package cache

import "errors"

// cpuid executes the CPUID instruction (cpuid_amd64.s).
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// fromCPUID asks the CPU for its caches: leaf 4 on Intel, 0x8000001D on AMD
// (when leaf 0x80000001 advertises TOPOEXT).
func fromCPUID() (LLC, error) {
	_, b, c, d := cpuid(0, 0)
	vendor := string(le(b)) + string(le(d)) + string(le(c))
	leaf := uint32(4)
	if vendor == "AuthenticAMD" || vendor == "HygonGenuine" {
		maxExt, _, _, _ := cpuid(0x80000000, 0)
		if _, _, ecx, _ := cpuid(0x80000001, 0); maxExt < 0x8000001D || ecx&(1<<22) == 0 {
			// No cache topology leaf (hypervisors often hide TOPOEXT):
			// the older L2/L3 leaf still gives the sizes.
			if maxExt < 0x80000006 {
				return LLC{}, errors.New("the CPU has neither leaf 0x8000001D nor leaf 0x80000006")
			}
			_, _, c, d := cpuid(0x80000006, 0)
			return fromAMDLeaf6(c, d)
		}
		leaf = 0x8000001D
	} else if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 4 {
		return LLC{}, errors.New("the CPU has no deterministic cache leaf 4")
	}
	var caches []leafCache
	for sub := uint32(0); sub < 16; sub++ {
		a, b, c, _ := cpuid(leaf, sub)
		lc, ok := decodeLeaf(a, b, c)
		if !ok {
			break
		}
		caches = append(caches, lc)
	}
	l, ok := lastOf(caches)
	if !ok {
		return LLC{}, errors.New("CPUID lists no data or unified cache")
	}
	return l, nil
}

// le returns the four bytes of r, least significant first.
func le(r uint32) []byte { return []byte{byte(r), byte(r >> 8), byte(r >> 16), byte(r >> 24)} }
