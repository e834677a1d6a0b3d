package ilist

import (
	"slices"
	"testing"
)

// item can be on two lists at once, as a Request is.
type item struct {
	id   int
	a, b Node[item]
}

// model is the oracle: each list as a slice of ids, in order.
type model struct {
	items  []*item
	la, lb List[item]
	ma, mb []int
}

func newModel(n int) *model {
	m := &model{}
	for i := range n {
		m.items = append(m.items, &item{id: i})
	}
	return m
}

// apply runs one operation chosen by op on item it.
func (m *model) apply(op, it byte) {
	x := m.items[int(it)%len(m.items)]
	switch op % 6 {
	case 0: // push on a (if on none there)
		if !x.a.Linked() {
			m.la.PushBack(&x.a, x)
			m.ma = append(m.ma, x.id)
		}
	case 1:
		if !x.b.Linked() {
			m.lb.PushBack(&x.b, x)
			m.mb = append(m.mb, x.id)
		}
	case 2: // remove from a, a no-op when not there
		m.la.Remove(&x.a)
		m.ma = slices.DeleteFunc(m.ma, func(id int) bool { return id == x.id })
	case 3:
		m.lb.Remove(&x.b)
		m.mb = slices.DeleteFunc(m.mb, func(id int) bool { return id == x.id })
	case 4: // pop a's front
		got := m.la.PopFront()
		if len(m.ma) == 0 {
			if got != nil {
				panic("PopFront of an empty list returned an element")
			}
			return
		}
		if got == nil || got.id != m.ma[0] {
			panic("PopFront returned the wrong element")
		}
		m.ma = m.ma[1:]
	case 5: // removing through the wrong list changes nothing
		m.lb.Remove(&x.a)
		m.la.Remove(&x.b)
	}
}

// check compares both lists with the model, walking both ways.
func (m *model) check(t *testing.T) {
	t.Helper()
	for _, c := range []struct {
		name string
		l    *List[item]
		want []int
		node func(*item) *Node[item]
	}{
		{"a", &m.la, m.ma, func(x *item) *Node[item] { return &x.a }},
		{"b", &m.lb, m.mb, func(x *item) *Node[item] { return &x.b }},
	} {
		var fwd, back []int
		for x := c.l.Front(); x != nil && len(fwd) <= len(m.items); x = c.node(x).Next() {
			fwd = append(fwd, x.id)
		}
		for x := c.l.Back(); x != nil && len(back) <= len(m.items); x = c.node(x).Prev() {
			back = append(back, x.id)
		}
		slices.Reverse(back)
		if !slices.Equal(fwd, c.want) || !slices.Equal(back, c.want) || c.l.Len() != len(c.want) {
			t.Fatalf("list %s: forward %v, backward %v, Len %d; want %v", c.name, fwd, back, c.l.Len(), c.want)
		}
		for _, x := range m.items {
			on := slices.Contains(c.want, x.id)
			if n := c.node(x); n.On(c.l) != on || n.Linked() != on {
				t.Fatalf("list %s: item %d On=%v Linked=%v, want %v", c.name, x.id, n.On(c.l), n.Linked(), on)
			}
		}
	}
}

// FuzzList runs a sequence of operations on two lists sharing their items
// and compares them after each step with a model made of slices.
func FuzzList(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 2, 2, 1, 4, 0, 1, 0, 3, 0})
	f.Add([]byte{0, 3, 1, 3, 0, 2, 5, 3, 2, 2, 4, 4, 4, 4})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := newModel(5)
		for i := 0; i+1 < len(ops); i += 2 {
			m.apply(ops[i], ops[i+1])
			m.check(t)
		}
	})
}

// TestList is FuzzList over every sequence of three operations on three
// items, so the property holds without the fuzzer.
func TestList(t *testing.T) {
	const ops, items = 6, 3
	var seq [6]byte
	var walk func(k int)
	walk = func(k int) {
		if k == len(seq) {
			m := newModel(items)
			for i := 0; i < len(seq); i += 2 {
				m.apply(seq[i], seq[i+1])
				m.check(t)
			}
			return
		}
		limit := byte(ops)
		if k%2 == 1 {
			limit = items
		}
		for v := byte(0); v < limit; v++ {
			seq[k] = v
			walk(k + 1)
		}
	}
	walk(0)
}

func TestZero(t *testing.T) {
	var l List[item]
	var x item
	if l.Front() != nil || l.Back() != nil || l.PopFront() != nil || l.Len() != 0 {
		t.Fatal("the zero List is not empty")
	}
	if x.a.Linked() || x.a.Next() != nil || x.a.Prev() != nil {
		t.Fatal("the zero Node is linked")
	}
	l.Remove(&x.a) // not on l: nothing happens
	if l.Len() != 0 {
		t.Fatal("Remove of an unlinked node changed the list")
	}
}

// BenchmarkPushRemove: putting an element on a list and taking it off
// allocates nothing.
func BenchmarkPushRemove(b *testing.B) {
	var l List[item]
	xs := make([]item, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		x := &xs[i%len(xs)]
		l.PushBack(&x.a, x)
		if l.Len() == len(xs) {
			for l.PopFront() != nil {
			}
		}
	}
}
