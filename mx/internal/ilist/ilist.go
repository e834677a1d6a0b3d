// Package ilist is the intrusive doubly linked list that mx keeps its
// queues in: posted receives, unexpected messages, completed requests, each
// partner's unacknowledged, waiting and connecting sends, the sends waiting
// for a region and the receives waiting for a pull handle.
//
// Intrusive means the links live in the element: a type that sits on a list
// has a Node field for it (a Request has two, as it can be on one
// protocol queue and on its endpoint's done queue at once). Putting an
// element on a list or taking it off therefore allocates nothing and costs a
// few pointer stores, and removing an element from the middle needs no
// search. A Node also records the list it is on, so Remove is safe to call
// for an element that is on another list or on none, and an element can be
// asked where it is (On, Linked).
//
// A List and its Nodes are not safe for concurrent use; mx guards them with
// the board's lock. The zero List is empty and ready; the zero Node is
// unlinked.
package ilist

// Node is the links one element carries for one list. Embed it (as a named
// field) in the element type, once per list the element can be on at the
// same time.
type Node[T any] struct {
	next, prev *Node[T]
	list       *List[T]
	elem       *T
}

// Next returns the element after this one on its list, nil at the end or
// when the node is on no list.
func (n *Node[T]) Next() *T {
	if n.next == nil {
		return nil
	}
	return n.next.elem
}

// Prev returns the element before this one on its list, nil at the front
// or when the node is on no list.
func (n *Node[T]) Prev() *T {
	if n.prev == nil {
		return nil
	}
	return n.prev.elem
}

// On reports whether the node is on list l.
func (n *Node[T]) On(l *List[T]) bool { return n.list == l }

// Linked reports whether the node is on any list.
func (n *Node[T]) Linked() bool { return n.list != nil }

// List is a doubly linked list of elements of type T, linked through one
// Node field of each.
type List[T any] struct {
	head, tail *Node[T]
	n          int
}

// Len returns the number of elements on the list.
func (l *List[T]) Len() int { return l.n }

// Front returns the first element, nil when the list is empty.
func (l *List[T]) Front() *T {
	if l.head == nil {
		return nil
	}
	return l.head.elem
}

// Back returns the last element, nil when the list is empty.
func (l *List[T]) Back() *T {
	if l.tail == nil {
		return nil
	}
	return l.tail.elem
}

// PushBack appends elem, whose links for this list are n (a field of
// elem). n must be on no list.
func (l *List[T]) PushBack(n *Node[T], elem *T) {
	n.list, n.elem = l, elem
	n.next = nil
	n.prev = l.tail
	if l.tail != nil {
		l.tail.next = n
	} else {
		l.head = n
	}
	l.tail = n
	l.n++
}

// Remove takes the element whose links are n off the list. It does nothing
// when n is not on l (on another list, or on none).
func (l *List[T]) Remove(n *Node[T]) {
	if n.list != l {
		return
	}
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.next, n.prev, n.list, n.elem = nil, nil, nil, nil
	l.n--
}

// PopFront takes the first element off the list and returns it, nil when
// the list is empty.
func (l *List[T]) PopFront() *T {
	n := l.head
	if n == nil {
		return nil
	}
	elem := n.elem
	l.Remove(n)
	return elem
}
