// Package rollback is the undo stack of a setup made of steps (open a
// device, map its registers, enable its interrupts, ...): each step that
// succeeds appends what undoes it, and a step that fails runs the stack,
// the last step undone first, so that a failed open leaves nothing of
// itself behind.
//
// A setup with many steps runs the stack from one deferred closure that
// looks at its named error result, so that only a failure undoes (see the
// example). Deferring Run itself would undo a setup that succeeded too.
package rollback

// Stack is the undo steps of a setup, in the order its steps were done.
// A step appends its undo with append, as to any slice.
type Stack []func()

// Run undoes the steps, the last done first, and empties the stack, so
// that a second Run undoes nothing. It undoes whatever the stack holds
// when it is called, whether or not the setup failed: call it on a
// failure, not in a bare defer.
func (s *Stack) Run() {
	for i := len(*s) - 1; i >= 0; i-- {
		(*s)[i]()
	}
	*s = nil
}
