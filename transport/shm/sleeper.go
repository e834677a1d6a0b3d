package shm

import "golang.org/x/sys/unix"

// ArmSleep prepares a sleep on the doorbell's eventfd outside Recv (see
// [transport.Sleeper]): it announces the sleep to producers, as Recv does
// before it sleeps, then looks once more (Pending). The caller serializes
// it with its own Recv calls, as for Pending.
func (t *Transport) ArmSleep() (fd int, sleep bool) {
	t.slp.Store(1)
	if t.Pending() || t.wakeReq.Load() {
		return t.ev.fd, false
	}
	return t.ev.fd, true
}

// EndSleep ends a sleep ArmSleep prepared, and reads the eventfd's count
// when the caller's poll found it readable, so the next sleep sleeps.
func (t *Transport) EndSleep(readable bool) {
	t.slp.Store(0)
	if readable {
		var b [8]byte
		_, _ = unix.Read(t.ev.fd, b[:])
	}
}
