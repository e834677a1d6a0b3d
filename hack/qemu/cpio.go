package qemu

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Archive is the content of an initramfs: directories, regular files and
// device nodes, written as a "newc" cpio archive (the format the kernel
// unpacks into its initial root file system). Building the archive in Go
// needs no cpio tool and no mknod privilege for /dev/console.
type Archive struct {
	entries map[string]entry
}

type entry struct {
	mode         uint32 // file type and permission bits
	data         []byte
	rmajor, rmin uint32 // device numbers of a device node
}

// File type bits of a cpio mode.
const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeChr  = 0o020000
)

// NewArchive returns an empty archive.
func NewArchive() *Archive { return &Archive{entries: map[string]entry{}} }

// clean checks an archive path ("init", "mods/vfio.ko") and adds its parent
// directories.
func (a *Archive) clean(name string) (string, error) {
	name = strings.Trim(name, "/")
	if name == "" || strings.Contains(name, "..") {
		return "", fmt.Errorf("initramfs: bad path %q", name)
	}
	if i := strings.LastIndex(name, "/"); i > 0 {
		a.Dir(name[:i])
	}
	return name, nil
}

// Dir adds a directory and its parents.
func (a *Archive) Dir(name string) {
	name = strings.Trim(name, "/")
	for name != "" {
		if _, ok := a.entries[name]; !ok {
			a.entries[name] = entry{mode: modeDir | 0o755}
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			break
		}
		name = name[:i]
	}
}

// File adds a regular file with permissions perm.
func (a *Archive) File(name string, data []byte, perm uint32) error {
	name, err := a.clean(name)
	if err != nil {
		return err
	}
	a.entries[name] = entry{mode: modeFile | perm&0o7777, data: data}
	return nil
}

// CharDev adds a character device node.
func (a *Archive) CharDev(name string, perm, major, minor uint32) error {
	name, err := a.clean(name)
	if err != nil {
		return err
	}
	a.entries[name] = entry{mode: modeChr | perm&0o7777, rmajor: major, rmin: minor}
	return nil
}

// WriteTo writes the archive in newc format, parents before children, and
// the trailer.
func (a *Archive) WriteTo(w io.Writer) (int64, error) {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names) // "a" sorts before "a/b"
	var buf bytes.Buffer
	ino := uint32(1)
	for _, n := range names {
		e := a.entries[n]
		writeHeader(&buf, n, e, ino)
		buf.Write(e.data)
		pad4(&buf)
		ino++
	}
	writeHeader(&buf, "TRAILER!!!", entry{}, 0)
	return buf.WriteTo(w)
}

// writeHeader writes a 110-byte newc header, the NUL-terminated name and the
// padding to a 4-byte boundary.
func writeHeader(buf *bytes.Buffer, name string, e entry, ino uint32) {
	nlink := uint32(1)
	if e.mode&modeDir == modeDir {
		nlink = 2
	}
	fmt.Fprintf(buf, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.mode, 0, 0, nlink, 0, len(e.data), 0, 0, e.rmajor, e.rmin, len(name)+1, 0)
	buf.WriteString(name)
	buf.WriteByte(0)
	pad4(buf)
}

func pad4(buf *bytes.Buffer) {
	for buf.Len()%4 != 0 {
		buf.WriteByte(0)
	}
}
