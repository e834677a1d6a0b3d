package rollback

import (
	"slices"
	"testing"
)

// A stack undoes its steps in reverse, each once, and an empty one does
// nothing.
func TestRunReverses(t *testing.T) {
	var got []int
	var s Stack
	Stack(nil).Run()
	for i := range 3 {
		s = append(s, func() { got = append(got, i) })
	}
	s.Run()
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("undone %v, want %v", got, want)
	}
}
