package nictest

import "github.com/gomx-dev/gomx/nicdrv"

// txStalls is how many times in a row MacSwap offers frames to a TX ring
// that takes none before it drops them: a NIC sends what its ring holds
// without the driver's help, so a ring that stays full means a stopped
// link, where a reflector must not hang.
const txStalls = 1 << 16

// MacSwap is one turn of a macswap reflector (DPDK testpmd's
// --forward-mode=macswap) on queue q of n: it receives one batch of up to
// len(rx) frames (testpmd's --burst) and sends them back out on the same
// queue with their destination and source MAC addresses swapped, in one
// TxBatch call when the ring has room. It reports how many frames went
// back; frames a TX ring would not take after many tries are given back
// to the pool, as testpmd drops what its TX burst leaves. A reflector
// loop calls MacSwap until told to stop; it allocates nothing.
func MacSwap(n nicdrv.NIC, q int, rx []*nicdrv.Buffer) (int, error) {
	k, err := n.RxBatch(q, rx)
	if err != nil || k == 0 {
		return 0, err
	}
	for _, b := range rx[:k] {
		d := b.Data
		var tmp [6]byte
		copy(tmp[:], d[0:6])
		copy(d[0:6], d[6:12])
		copy(d[6:12], tmp[:])
	}
	sent := 0
	for stalls := 0; sent < k && stalls < txStalls; {
		m, err := n.TxBatch(q, rx[sent:k])
		sent += m
		if err != nil {
			_ = n.Pool(0).Free(rx[sent:k]...)
			return sent, err
		}
		if m == 0 {
			stalls++
		}
	}
	if sent < k {
		_ = n.Pool(0).Free(rx[sent:k]...)
	}
	return sent, nil
}
