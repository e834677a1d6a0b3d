// Package rollback is the undo stack of a setup made of steps (open a
// device, map its registers, enable its interrupts, ...): each step that
// succeeds appends what undoes it, and a step that fails runs the stack,
// the last step undone first, so that a failed open leaves nothing of
// itself behind. The ioat, vfio and xdp openers use it.
package rollback

// Stack is the undo steps of a setup, in the order its steps were done.
// A step appends its undo with append, as to any slice.
type Stack []func()

// Run undoes the steps, the last done first.
func (s Stack) Run() {
	for i := len(s) - 1; i >= 0; i-- {
		s[i]()
	}
}
