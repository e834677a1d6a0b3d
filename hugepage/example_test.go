package hugepage_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/gomx-dev/gomx/hugepage"
)

// Example allocates memory a device can reach by DMA. With free 2 MiB
// hugepages it gets them; without (a fresh machine, an ordinary user) it
// falls back to locked 4 KiB pages and Degraded says why and how to
// reserve hugepages, so the program runs either way and can tell its user.
// Only a locked-memory limit too small for the fallback is an error, and
// it names the fix.
func Example() {
	r, err := hugepage.Alloc(1<<20, hugepage.DefaultOptions())
	if err != nil {
		fmt.Println(err) // e.g. "... raise the locked-memory limit ... with ulimit -l ..."
		return
	}
	defer r.Close()
	if why := r.Degraded(); why != "" {
		// e.g. "no free 2MiB hugepages (HugePages_Free=0 of 0): reserve some with
		// `ioatctl setup` or `echo 1 > /proc/sys/vm/nr_hugepages`; using locked 4KiB pages"
		log.Print("DMA memory: ", why)
	}
	buf := r.Bytes()[:1<<20]
	copy(buf, "resident before any device touches it")
	fmt.Printf("%d bytes, in pages of %v or %v: %v\n", len(buf), hugepage.Size2M, hugepage.Size4K,
		r.PageSize() == hugepage.Size2M || r.PageSize() == hugepage.Size4K)

	// A Pool carves a region into equal buffers; Get and Put neither lock
	// nor allocate.
	p, err := hugepage.NewPool(2048, 64, hugepage.DefaultOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	b, err := p.Get()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("buffer:", len(b))
	fmt.Println("put twice:", p.Put(b), errors.Is(p.Put(b), hugepage.ErrDoublePut))
	// Output:
	// 1048576 bytes, in pages of 2MiB or 4KiB: true
	// buffer: 2048
	// put twice: <nil> true
}
