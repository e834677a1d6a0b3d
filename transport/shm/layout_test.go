package shm

import (
	"reflect"
	"testing"
	"unsafe"
)

// fieldOffset is the offset of the field name (perhaps promoted from an
// embedded struct) in struct type t.
func fieldOffset(t *testing.T, typ reflect.Type, name string) uintptr {
	t.Helper()
	f, ok := typ.FieldByName(name)
	if !ok {
		t.Fatalf("%v has no field %s", typ, name)
	}
	var off uintptr
	ty := typ
	for _, i := range f.Index {
		sf := ty.Field(i)
		off += sf.Offset
		ty = sf.Type
	}
	return off
}

// TestHotLines checks that the fields a lane message's send, look and
// take read and write stay on the cache lines their structs' comments
// name (two of outRing, two of Transport, one of inRing for a look and
// another for a take), and that the structs' allocations are 64-byte
// aligned, so those lines are whole lines: on a CPU that other processes
// share, every line a message touches is a miss.
func TestHotLines(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the hot lines are laid out for 64-bit pointers")
	}
	cases := []struct {
		v      any
		fields []string
		lines  uintptr
	}{
		{new(outRing), []string{"data", "cur", "clear", "lap", "headSeen", "peer", "mtu", "dead", "blOn", "retireAsk", "shut",
			"sent", "notify", "sum", "slp", "mu"}, 2},
		{new(Transport), []string{"hot", "rr", "peeked", "peekedAt", "peekedLen", "toCommit", "peekedQ", "recvd",
			"peekedQR", "peekedQN", "mtu", "nLanes", "fullScan", "q"}, 2},
		{new(inRing), []string{"wordAt", "dead", "gone", "data", "cur", "pos", "peer"}, 1},
		{new(inRing), []string{"wordAt", "pubHead", "pubEvery", "head"}, 2},
	}
	for _, c := range cases {
		// Allocated as the transport allocates them.
		v := reflect.ValueOf(c.v).Elem()
		typ := v.Type()
		first := v.FieldByName(c.fields[0]).UnsafeAddr()
		if first%64 != 0 {
			t.Errorf("%v.%s at %#x (offset %d), not at the start of a cache line: move the fields before it (the runtime puts an 8-byte header before an object of more than 512 bytes with pointers), or pad %v (%d bytes) to a size class that is a multiple of 64 bytes",
				typ, c.fields[0], first, fieldOffset(t, typ, c.fields[0]), typ, typ.Size())
		}
		base := fieldOffset(t, typ, c.fields[0])
		for _, name := range c.fields[1:] {
			if off := fieldOffset(t, typ, name); off < base || off >= base+64*c.lines {
				t.Errorf("%v.%s at offset %d: want it in [%d, %d), with the fields of the path it serves", typ, name, off, base, base+64*c.lines)
			}
		}
	}
	// The receive queue's cursor, its word and broken: on Transport's
	// second hot line, with q.
	q := reflect.TypeOf(qConsumer{})
	for _, name := range []string{"cur", "wordAt", "broken"} {
		if off := fieldOffset(t, reflect.TypeOf(Transport{}), "q") + fieldOffset(t, q, name) - fieldOffset(t, reflect.TypeOf(Transport{}), "hot"); off >= 128 {
			t.Errorf("Transport.q.%s at %d bytes past hot: want it on the second hot line", name, off)
		}
	}
}
