// Package dmasync tells Go's race detector about the ordering that device
// memory provides.
//
// A device reports progress by writing a word in DMA memory (a completion
// write-back, a descriptor status), and the driver polls that word with
// atomic loads. When the memory is an mmap'd hugepage outside the Go heap,
// the race detector does not track the atomics, so it cannot see that data
// the device wrote before the word is safe to read after it, and reports
// false races. An emulated device calls Publish after each such write; a
// driver calls Observe after it sees one. Both compile to nothing in
// ordinary builds.
package dmasync
