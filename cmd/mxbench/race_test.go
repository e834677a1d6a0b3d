//go:build race

package main

// raceEnabled is set when the tests run with the race detector, whose
// bookkeeping makes every rank of a job several times slower.
const raceEnabled = true
