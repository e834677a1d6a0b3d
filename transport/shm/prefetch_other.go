//go:build !amd64

package shm

// prefetch does nothing here: a hint only (see prefetch_amd64.go).
func prefetch(p *byte) {}
