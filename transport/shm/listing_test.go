package shm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBoardsListedCountsSockets checks boardsListed, which reads the
// directory with getdents into a reused buffer, against os.ReadDir's
// count, as the directory grows past one buffer's worth of names and
// shrinks again, and that it allocates nothing once its descriptor is
// open.
func TestBoardsListedCountsSockets(t *testing.T) {
	dir := t.TempDir()
	tr := &Transport{opts: Options{Dir: dir}}
	defer tr.closeDirList()
	oracle := func() int {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".sock") {
				n++
			}
		}
		return n
	}
	touch := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		if got, want := tr.boardsListed(), oracle(); got != want {
			t.Fatalf("%s: boardsListed %d, os.ReadDir counts %d", when, got, want)
		}
	}
	check("empty")
	// Long names, so that 400 of them need several 8 KiB reads.
	pad := strings.Repeat("x", 60)
	for i := range 400 {
		touch(fmt.Sprintf("board-%s-%d.sock", pad, i))
		if i%3 == 0 {
			touch(fmt.Sprintf("ring-%s-%d", pad, i))    // not a socket
			touch(fmt.Sprintf("sock-%s-%d.so", pad, i)) // nor this
		}
		if i%57 == 0 {
			check(fmt.Sprintf("after %d sockets", i+1))
		}
	}
	check("400 sockets")
	if a := testing.AllocsPerRun(20, func() { tr.boardsListed() }); a != 0 {
		t.Errorf("boardsListed allocates %.1f times a call, want 0", a)
	}
	for i := range 400 {
		if i%2 == 0 {
			os.Remove(filepath.Join(dir, fmt.Sprintf("board-%s-%d.sock", pad, i)))
		}
	}
	check("200 removed")
	// The directory removed and made again under the open descriptor
	// (a user clearing /dev/shm/gomx-UID while a board runs): the count
	// follows the path, not the old directory.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		touch(fmt.Sprintf("board-%d.sock", i))
	}
	check("directory made again")
	tr.closeDirList()
	if n := tr.boardsListed(); n != 0 {
		t.Fatalf("after Close boardsListed counts %d, want 0", n)
	}
}
