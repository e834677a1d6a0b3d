//go:build !race

package pci

// raceEnabled is set when the tests run with the race detector, which
// allocates on its own.
const raceEnabled = false
