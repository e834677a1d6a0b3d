package xdp

// This file is the only place that spells kernel UAPI names: the AF_XDP
// socket ABI of linux/if_xdp.h, the XDP program context of linux/bpf.h, and
// the ethtool ioctl ABI of linux/ethtool.h. Everything else in the package
// uses the Go names defined here. abi_unsafe_test.go checks sizes and offsets.

// AF_XDP socket level, options and bind flags (linux/if_xdp.h).
const (
	afXDP  = 44  // AF_XDP in linux/socket.h
	solXDP = 283 // SOL_XDP in linux/socket.h

	optMmapOffsets   = 1 // XDP_MMAP_OFFSETS
	optRxRing        = 2 // XDP_RX_RING
	optTxRing        = 3 // XDP_TX_RING
	optUmemReg       = 4 // XDP_UMEM_REG
	optFillRing      = 5 // XDP_UMEM_FILL_RING
	optCompRing      = 6 // XDP_UMEM_COMPLETION_RING
	optStatistics    = 7 // XDP_STATISTICS
	optOptions       = 8 // XDP_OPTIONS
	optMaxTxSkbBudge = 9 // XDP_MAX_TX_SKB_BUDGET

	bindSharedUmem = 1 << 0 // XDP_SHARED_UMEM
	bindCopy       = 1 << 1 // XDP_COPY
	bindZeroCopy   = 1 << 2 // XDP_ZEROCOPY
	bindNeedWakeup = 1 << 3 // XDP_USE_NEED_WAKEUP
	bindUseSG      = 1 << 4 // XDP_USE_SG: frames of several descriptors

	pktContd = 1 << 0 // XDP_PKT_CONTD, in a descriptor's options: the frame goes on

	ringNeedWakeup = 1 << 0 // XDP_RING_NEED_WAKEUP, in a ring's flags word

	optionsZeroCopy = 1 << 0 // XDP_OPTIONS_ZEROCOPY, in struct xdp_options

	pgoffRxRing   = 0           // XDP_PGOFF_RX_RING
	pgoffTxRing   = 0x80000000  // XDP_PGOFF_TX_RING
	pgoffFillRing = 0x100000000 // XDP_UMEM_PGOFF_FILL_RING
	pgoffCompRing = 0x180000000 // XDP_UMEM_PGOFF_COMPLETION_RING
)

// Socket options for busy polling (asm-generic/socket.h).
const (
	soBusyPoll       = 46 // SO_BUSY_POLL
	soPreferBusyPoll = 69 // SO_PREFER_BUSY_POLL
	soBusyPollBudget = 70 // SO_BUSY_POLL_BUDGET
)

// sockaddrXDP is analogous to struct sockaddr_xdp in linux/if_xdp.h.
type sockaddrXDP struct {
	Family       uint16 // sxdp_family: AF_XDP
	Flags        uint16 // sxdp_flags: XDP_SHARED_UMEM, XDP_COPY, ...
	Ifindex      uint32 // sxdp_ifindex
	QueueID      uint32 // sxdp_queue_id
	SharedUmemFD uint32 // sxdp_shared_umem_fd
}

// ringOffset is analogous to struct xdp_ring_offset in linux/if_xdp.h: where
// a ring's producer index, consumer index, descriptors and flags word sit in
// its mapping.
type ringOffset struct {
	Producer uint64
	Consumer uint64
	Desc     uint64
	Flags    uint64
}

// mmapOffsets is analogous to struct xdp_mmap_offsets in linux/if_xdp.h.
type mmapOffsets struct {
	Rx   ringOffset
	Tx   ringOffset
	Fill ringOffset // fr
	Comp ringOffset // cr
}

// umemReg is analogous to struct xdp_umem_reg in linux/if_xdp.h.
type umemReg struct {
	Addr          uint64 // start of the UMEM in the process
	Len           uint64
	ChunkSize     uint32 // frame size
	Headroom      uint32
	Flags         uint32
	TxMetadataLen uint32
}

// statistics is analogous to struct xdp_statistics in linux/if_xdp.h.
type statistics struct {
	RxDropped            uint64
	RxInvalidDescs       uint64
	TxInvalidDescs       uint64
	RxRingFull           uint64
	RxFillRingEmptyDescs uint64
	TxRingEmptyDescs     uint64
}

// xdpOptions is analogous to struct xdp_options in linux/if_xdp.h.
type xdpOptions struct {
	Flags uint32
}

// xdpDesc is analogous to struct xdp_desc in linux/if_xdp.h: one RX or TX
// ring entry.
type xdpDesc struct {
	Addr    uint64
	Len     uint32
	Options uint32
}

// Offsets into struct xdp_md (linux/bpf.h), the XDP program's context.
const (
	mdData         = 0  // data
	mdDataEnd      = 4  // data_end
	mdRxQueueIndex = 16 // rx_queue_index
)

// XDP program return codes (enum xdp_action in linux/bpf.h).
const (
	actionPass = 2 // XDP_PASS
)

// The ethtool ioctl ABI (linux/ethtool.h, linux/sockios.h).
const (
	siocEthtool = 0x8946 // SIOCETHTOOL

	ethtoolGChannels    = 0x3c       // ETHTOOL_GCHANNELS
	ethtoolGRxRings     = 0x2d       // ETHTOOL_GRXRINGS
	ethtoolGRxClsRlCnt  = 0x2e       // ETHTOOL_GRXCLSRLCNT
	ethtoolGRxClsRlAll  = 0x30       // ETHTOOL_GRXCLSRLALL
	ethtoolSRxClsRlDel  = 0x31       // ETHTOOL_SRXCLSRLDEL
	ethtoolSRxClsRlIns  = 0x32       // ETHTOOL_SRXCLSRLINS
	flowUDPv4           = 0x02       // UDP_V4_FLOW
	flowEther           = 0x12       // ETHER_FLOW
	rxClsLocAny         = 0xffffffff // RX_CLS_LOC_ANY
	rxClsLocSpecial     = 0x80000000 // RX_CLS_LOC_SPECIAL, in rule_cnt data
	ethtoolFlowUnionLen = 52         // sizeof(union ethtool_flow_union)
)

// ethtoolChannels is analogous to struct ethtool_channels in
// linux/ethtool.h.
type ethtoolChannels struct {
	Cmd           uint32
	MaxRx         uint32
	MaxTx         uint32
	MaxOther      uint32
	MaxCombined   uint32
	RxCount       uint32
	TxCount       uint32
	OtherCount    uint32
	CombinedCount uint32
}

// ethtoolFlowExt is analogous to struct ethtool_flow_ext in linux/ethtool.h.
type ethtoolFlowExt struct {
	Padding   [2]byte
	HDest     [6]byte // h_dest, with FLOW_MAC_EXT
	VlanEtype [2]byte // big endian
	VlanTCI   [2]byte // big endian
	Data      [8]byte // two big-endian __be32
}

// ethtoolRxFlowSpec is analogous to struct ethtool_rx_flow_spec in
// linux/ethtool.h. HU and MU hold union ethtool_flow_union: struct ethhdr
// for ETHER_FLOW, struct ethtool_tcpip4_spec for UDP_V4_FLOW, in wire order.
type ethtoolRxFlowSpec struct {
	FlowType   uint32
	HU         [ethtoolFlowUnionLen]byte
	HExt       ethtoolFlowExt
	MU         [ethtoolFlowUnionLen]byte
	MExt       ethtoolFlowExt
	_          uint32 // padding the kernel's layout has before ring_cookie
	RingCookie uint64
	Location   uint32
	_          uint32
}

// ethtoolRxnfc is analogous to struct ethtool_rxnfc in linux/ethtool.h,
// without the flexible rule_locs array (which follows it in memory for
// ETHTOOL_GRXCLSRLALL).
type ethtoolRxnfc struct {
	Cmd      uint32
	FlowType uint32
	Data     uint64
	FS       ethtoolRxFlowSpec
	RuleCnt  uint32 // union with rss_context
	_        uint32
}

// Offsets inside union ethtool_flow_union.
const (
	etherSpecDst   = 0  // struct ethhdr h_dest
	etherSpecProto = 12 // struct ethhdr h_proto
	tcpip4SpecDst  = 4  // struct ethtool_tcpip4_spec ip4dst
	tcpip4SpecPDst = 10 // struct ethtool_tcpip4_spec pdst
)

// ifreqData is analogous to struct ifreq in linux/if.h with ifr_data set:
// the interface name, then a pointer to the ethtool command.
type ifreqData struct {
	Name [16]byte
	Data uintptr
	_    [16]byte
}
