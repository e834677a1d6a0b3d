// Package layouttest checks, in tests, that the fields a hot path reads
// and writes in a struct stay on the few cache lines the struct's
// comments name: on a CPU that other processes' turns share, every line
// a message touches is a miss.
//
// Where a field falls in its cache line depends on the struct's layout
// and on where the allocator puts the struct. Go's runtime (1.22 and
// later, 1.26 here) puts an 8-byte header before a heap object of more
// than 512 bytes that holds pointers, and such an object's slot is
// 64-byte aligned, so the object starts 8 bytes into a line; a smaller
// object starts where its size class puts it. HotLines asserts where the
// first field of a group lies in its line, from its address, and checks
// the others by their offsets from it, so that a change of allocator
// fails one plain assertion that says what to do rather than moving the
// lines unnoticed.
package layouttest

import (
	"reflect"
	"testing"
)

// Line is the cache line size the layouts are made for.
const Line = 64

// HeaderNote explains where a heap object starts in its cache line, for
// failure messages.
const HeaderNote = "the runtime puts an 8-byte header before a heap object of more than 512 bytes with pointers, " +
	"so such an object starts 8 bytes into a cache line; a smaller one starts where its size class puts it"

// Offset is the offset of field name (perhaps promoted from an embedded
// struct) in struct type typ, and whether typ has it.
func Offset(typ reflect.Type, name string) (uintptr, bool) {
	f, ok := typ.FieldByName(name)
	if !ok {
		return 0, false
	}
	var off uintptr
	ty := typ
	for _, i := range f.Index {
		sf := ty.Field(i)
		off += sf.Offset
		ty = sf.Type
	}
	return off, true
}

// HotLines checks that in *v, a struct allocated as its package
// allocates it, fields[0] lies at byte at of a cache line, and that the
// other fields lie, whole, at or after it and within lines cache lines
// of the start of fields[0]'s line. It reports each departure with t.Errorf.
func HotLines(t testing.TB, v any, at uintptr, lines uintptr, fields ...string) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	typ := rv.Type()
	first := rv.FieldByName(fields[0])
	if !first.IsValid() {
		t.Errorf("%v has no field %s", typ, fields[0])
		return
	}
	base, _ := Offset(typ, fields[0])
	if a := first.UnsafeAddr(); a%Line != at {
		t.Errorf("%v.%s at %#x (offset %d), %d bytes into its cache line, want %d (%s): lay the fields out again for where %v (%d bytes) now starts, and set the test's want",
			typ, fields[0], a, base, a%Line, at, HeaderNote, typ, typ.Size())
	}
	end := base + Line*lines - at
	for _, name := range fields[1:] {
		f, ok := typ.FieldByName(name)
		if !ok {
			t.Errorf("%v has no field %s", typ, name)
			continue
		}
		if off, _ := Offset(typ, name); off < base || off+f.Type.Size() > end {
			t.Errorf("%v.%s at offset %d (%d bytes): want it in [%d, %d), the %d cache lines from %s's, with the fields of the path it serves",
				typ, name, off, f.Type.Size(), base, end, lines, fields[0])
		}
	}
}
