package xdp

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ABI structs have the kernel's sizes and offsets (x86-64 and every
// other 64-bit Linux target).
func TestABILayout(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want uintptr
	}{
		{"sockaddr_xdp", unsafe.Sizeof(sockaddrXDP{}), 16},
		{"xdp_ring_offset", unsafe.Sizeof(ringOffset{}), 32},
		{"xdp_mmap_offsets", unsafe.Sizeof(mmapOffsets{}), 128},
		{"xdp_umem_reg", unsafe.Sizeof(umemReg{}), 32},
		{"xdp_statistics", unsafe.Sizeof(statistics{}), 48},
		{"xdp_options", unsafe.Sizeof(xdpOptions{}), 4},
		{"xdp_desc", unsafe.Sizeof(xdpDesc{}), 16},
		{"ethtool_channels", unsafe.Sizeof(ethtoolChannels{}), 36},
		{"ethtool_flow_ext", unsafe.Sizeof(ethtoolFlowExt{}), 20},
		{"ethtool_rx_flow_spec", unsafe.Sizeof(ethtoolRxFlowSpec{}), 168},
		{"ethtool_rx_flow_spec.ring_cookie", unsafe.Offsetof(ethtoolRxFlowSpec{}.RingCookie), 152},
		{"ethtool_rx_flow_spec.location", unsafe.Offsetof(ethtoolRxFlowSpec{}.Location), 160},
		{"ethtool_rxnfc", unsafe.Sizeof(ethtoolRxnfc{}), 192},
		{"ethtool_rxnfc.fs", unsafe.Offsetof(ethtoolRxnfc{}.FS), 16},
		{"ethtool_rxnfc.rule_cnt", unsafe.Offsetof(ethtoolRxnfc{}.RuleCnt), 184},
		{"ifreq", unsafe.Sizeof(ifreqData{}), 40},
		{"sockaddr_xdp.sxdp_queue_id", unsafe.Offsetof(sockaddrXDP{}.QueueID), 8},
		{"xdp_umem_reg.chunk_size", unsafe.Offsetof(umemReg{}.ChunkSize), 16},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

// Our names for the UAPI constants agree with golang.org/x/sys/unix where
// it has them.
func TestABIConstants(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want int64
	}{
		{"AF_XDP", afXDP, unix.AF_XDP},
		{"SOL_XDP", solXDP, unix.SOL_XDP},
		{"XDP_MMAP_OFFSETS", optMmapOffsets, unix.XDP_MMAP_OFFSETS},
		{"XDP_RX_RING", optRxRing, unix.XDP_RX_RING},
		{"XDP_TX_RING", optTxRing, unix.XDP_TX_RING},
		{"XDP_UMEM_REG", optUmemReg, unix.XDP_UMEM_REG},
		{"XDP_UMEM_FILL_RING", optFillRing, unix.XDP_UMEM_FILL_RING},
		{"XDP_UMEM_COMPLETION_RING", optCompRing, unix.XDP_UMEM_COMPLETION_RING},
		{"XDP_STATISTICS", optStatistics, unix.XDP_STATISTICS},
		{"XDP_OPTIONS", optOptions, unix.XDP_OPTIONS},
		{"XDP_MAX_TX_SKB_BUDGET", optMaxTxSkbBudge, unix.XDP_MAX_TX_SKB_BUDGET},
		{"XDP_SHARED_UMEM", bindSharedUmem, unix.XDP_SHARED_UMEM},
		{"XDP_COPY", bindCopy, unix.XDP_COPY},
		{"XDP_ZEROCOPY", bindZeroCopy, unix.XDP_ZEROCOPY},
		{"XDP_USE_NEED_WAKEUP", bindNeedWakeup, unix.XDP_USE_NEED_WAKEUP},
		{"XDP_RING_NEED_WAKEUP", ringNeedWakeup, unix.XDP_RING_NEED_WAKEUP},
		{"XDP_OPTIONS_ZEROCOPY", optionsZeroCopy, unix.XDP_OPTIONS_ZEROCOPY},
		{"XDP_PGOFF_RX_RING", pgoffRxRing, unix.XDP_PGOFF_RX_RING},
		{"XDP_PGOFF_TX_RING", pgoffTxRing, unix.XDP_PGOFF_TX_RING},
		{"XDP_UMEM_PGOFF_FILL_RING", pgoffFillRing, unix.XDP_UMEM_PGOFF_FILL_RING},
		{"XDP_UMEM_PGOFF_COMPLETION_RING", pgoffCompRing, unix.XDP_UMEM_PGOFF_COMPLETION_RING},
		{"XDP_PACKET_HEADROOM", xdpPacketHeadroom, unix.XDP_PACKET_HEADROOM},
		{"SO_BUSY_POLL", soBusyPoll, unix.SO_BUSY_POLL},
		{"SO_PREFER_BUSY_POLL", soPreferBusyPoll, unix.SO_PREFER_BUSY_POLL},
		{"SO_BUSY_POLL_BUDGET", soBusyPollBudget, unix.SO_BUSY_POLL_BUDGET},
		{"SIOCETHTOOL", siocEthtool, unix.SIOCETHTOOL},
		{"ETHTOOL_GCHANNELS", ethtoolGChannels, unix.ETHTOOL_GCHANNELS},
		{"ETHTOOL_GRXRINGS", ethtoolGRxRings, unix.ETHTOOL_GRXRINGS},
		{"ETHTOOL_GRXCLSRLCNT", ethtoolGRxClsRlCnt, unix.ETHTOOL_GRXCLSRLCNT},
		{"ETHTOOL_GRXCLSRLALL", ethtoolGRxClsRlAll, unix.ETHTOOL_GRXCLSRLALL},
		{"ETHTOOL_SRXCLSRLDEL", ethtoolSRxClsRlDel, unix.ETHTOOL_SRXCLSRLDEL},
		{"ETHTOOL_SRXCLSRLINS", ethtoolSRxClsRlIns, unix.ETHTOOL_SRXCLSRLINS},
		{"XDP_PASS", actionPass, 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, x/sys/unix says %#x", tc.name, tc.got, tc.want)
		}
	}
}
