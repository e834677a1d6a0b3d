package shm

// prefetch asks the CPU to bring the cache line at p in, without waiting
// for it (PREFETCHT0): a later store to the line then finds it in the
// cache, and the locked instructions after that store do not wait for it.
//
//go:noescape
func prefetch(p *byte)
