package ioat

// realBackends lists real CBDMA platforms to run the conformance suite on.
// It is filled in by vfio_test.go when VFIO devices are configured.
var realBackendsHook func() []backend

func realBackends() []backend {
	if realBackendsHook == nil {
		return nil
	}
	return realBackendsHook()
}
