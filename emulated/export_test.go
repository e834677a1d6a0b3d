package emulated

// SetHoldHook makes NIC i of p call f at each point where a frame that
// found its ring full and a refill can cross: 1 before the frame's
// receive locks the hold, 2 when the hold's own try found no room, 3 after
// a refill moved RDT; and, with AsyncDMA, 4 on the receive engine before
// each frame of its batch off the wire, holding no lock. Set it before
// frames flow.
func SetHoldHook(p *IXGBE, i int, f func(stage int)) {
	p.nics[i].holdHook = func(s holdStage) { f(int(s)) }
}
