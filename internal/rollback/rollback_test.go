package rollback

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// A stack undoes its steps in reverse, each once, and an empty one does
// nothing.
func TestRunReverses(t *testing.T) {
	var got []int
	var s Stack
	s.Run()
	for i := range 3 {
		s = append(s, func() { got = append(got, i) })
	}
	s.Run()
	s.Run()
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("undone %v, want %v", got, want)
	}
}

var errStep = errors.New("step failed")

// setup does three steps, the one numbered fail failing (none if it is
// out of range), recording in undone the steps undone, in the pattern the
// package doc gives: a deferred closure that runs the stack when the
// named error is set.
func setup(fail int, undone *[]int) (err error) {
	var undo Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()
	for i := range 3 {
		if i == fail {
			return fmt.Errorf("step %d: %w", i, errStep)
		}
		undo = append(undo, func() { *undone = append(*undone, i) })
	}
	return nil
}

// A setup that fails at a step undoes the steps before it, the last first;
// one that succeeds undoes nothing.
func TestDeferredOnNamedError(t *testing.T) {
	for fail, want := range [][]int{nil, {0}, {1, 0}, nil} {
		var undone []int
		err := setup(fail, &undone)
		if (fail < 3) != errors.Is(err, errStep) {
			t.Errorf("setup failing at step %d: %v", fail, err)
		}
		if !slices.Equal(undone, want) {
			t.Errorf("setup failing at step %d undid %v, want %v", fail, undone, want)
		}
	}
}

// A setup runs the stack from a deferred closure that looks at its named
// error, so that only a failed setup is undone.
func Example() {
	open := func(fail bool) (err error) {
		var undo Stack
		defer func() {
			if err != nil {
				undo.Run()
			}
		}()
		fmt.Println("open device")
		undo = append(undo, func() { fmt.Println("close device") })
		fmt.Println("map registers")
		undo = append(undo, func() { fmt.Println("unmap registers") })
		if fail {
			return errors.New("enable interrupts: no vector")
		}
		return nil
	}
	fmt.Println(open(true))
	fmt.Println(open(false))
	// Output:
	// open device
	// map registers
	// unmap registers
	// close device
	// enable interrupts: no vector
	// open device
	// map registers
	// <nil>
}
