package queueset

import (
	"errors"
	"testing"
)

// TestCloseAll: CloseAll closes exactly the open queues, joins their
// errors, and AnyOpen follows NOpen (a nil set has no queue open).
func TestCloseAll(t *testing.T) {
	var none *Set[int]
	if none.AnyOpen() {
		t.Error("a nil set has a queue open")
	}
	s := New[int](4)
	if s.AnyOpen() {
		t.Error("a new set has a queue open")
	}
	one, three := 1, 3
	s.Open[1].Store(&one)
	s.Open[3].Store(&three)
	s.NOpen.Add(2)
	if !s.AnyOpen() {
		t.Error("two queues open, AnyOpen says none")
	}
	errThree := errors.New("queue 3")
	var closed []int
	err := s.CloseAll(func(q *int) error {
		closed = append(closed, *q)
		if *q == 3 {
			return errThree
		}
		return nil
	})
	if len(closed) != 2 || closed[0] != 1 || closed[1] != 3 {
		t.Errorf("closed %v, want [1 3]", closed)
	}
	if !errors.Is(err, errThree) {
		t.Errorf("CloseAll: %v, want queue 3's error", err)
	}
}
