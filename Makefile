# gomx build, test and benchmark entry points. `make test` is the README's
# test command and what CI runs.
GO ?= go
STATICCHECK_VERSION ?= v0.8.2
GOBIN := $(shell $(GO) env GOPATH)/bin
PKGS := ./...

.PHONY: all build-usb libmyriexpress test-cabi test test-short test-unprivileged test-mpirun test-scale test-queued-faults test-no-spurious test-srun bench bench-smoke lint fmt-check vet staticcheck fuzz-smoke hugepages qemu-test peers-e1000e peers-usb peers-intranode peers-alltoall

all: lint test

# The USB CDC Ethernet driver's libusb device (nicdrv/usbnet, gousb) and
# mxbench --transport usb: cgo with libusb-1.0-0-dev, behind the usb tag.
build-usb:
	CGO_ENABLED=1 $(GO) build -tags usb ./nicdrv/usbnet/... ./cmd/mxbench/
	CGO_ENABLED=1 $(GO) vet -tags usb ./nicdrv/usbnet/... ./cmd/mxbench/
	CGO_ENABLED=1 $(GO) test -count=1 -tags usb -run '^TestOpenUSB' ./nicdrv/usbnet/

# Reserve 2 MiB hugepages for tests and benchmarks when root (harmless otherwise).
hugepages:
	@if [ "$$(id -u)" = 0 ] && [ "$$(cat /proc/sys/vm/nr_hugepages)" -lt 512 ]; then \
		echo 512 > /proc/sys/vm/nr_hugepages || true; fi
	@grep -E 'HugePages_(Total|Free)' /proc/meminfo || true

# The race detector needs cgo, which Go turns off where it finds no C
# compiler: there the suite runs without it, and says so.
RACE := $(if $(filter 1,$(shell $(GO) env CGO_ENABLED)),-race,)

test: hugepages
	@[ -n "$(RACE)" ] || echo "make test: no C compiler, so no race detector (apt-get install gcc adds it)" >&2
	$(GO) test $(RACE) -count=1 -timeout 30m $(PKGS)

test-short:
	$(GO) test -short -count=1 $(PKGS)

# The whole suite, with -race, as a newcomer runs it: nobody (uid 65534), with
# the 8 MiB locked-memory limit most machines give a user and no hugepages of
# its own, its own GOCACHE, the modules served from a copy of root's module
# cache (no network), and a clean environment (no GOMX_REQUIRE_*: what needs
# root skips with a hint). Run as root (any other user is unprivileged
# already: `make test`). mx's and ioat's suites take minutes each under the
# race detector, more than go test's default 10m on a loaded machine.
UNPRIV_DIR ?= /tmp/gomx-unprivileged
test-unprivileged:
	@test "$$(id -u)" = 0 || { echo "test-unprivileged switches to uid 65534 and needs root; as another user run make test"; exit 1; }
	rm -rf $(UNPRIV_DIR) && mkdir -p $(UNPRIV_DIR)
	cp -r "$$($(GO) env GOMODCACHE)/cache/download" $(UNPRIV_DIR)/proxy
	chown -R 65534:65534 $(UNPRIV_DIR)
	prlimit --memlock=8388608:8388608 setpriv --reuid=65534 --regid=65534 --clear-groups \
		env -i PATH="$$PATH" HOME=$(UNPRIV_DIR) GOCACHE=$(UNPRIV_DIR)/cache GOMODCACHE=$(UNPRIV_DIR)/mod \
		GOPROXY=file://$(UNPRIV_DIR)/proxy GOTOOLCHAIN=local GOFLAGS=-buildvcs=false \
		$(GO) test -race -timeout 30m -count=1 $(PKGS)

# The packages' own tests inside QEMU guests against real VFIO devices
# (hack/qemu): installs what it lacks from Debian, fetches the guest kernel,
# boots every configuration. Needs root. QEMU_CONFIG=iommu (or iommu-smp2,
# usb, noiommu, a comma list) boots only those; QEMU_CONFIG=usb-100k sends
# 100 000 frames through QEMU's usb-net (about 11 minutes, not in all);
# GOMX_QEMU_KEEP=1 keeps the
# artifacts and serial logs of a passing run (a failed run always keeps them).
QEMU_CONFIG ?= all
qemu-test:
	$(GO) run ./hack/qemu/cmd/qemu-test -config $(QEMU_CONFIG)

# gomx beside its peers on QEMU's e1000e pair, in one VM (hack/peers): mx
# and a raw ping over gomx's driver, the kernel's e1000e UDP with busy-poll,
# DPDK testpmd as reflector. Needs root; not part of qemu-test.
PEERS_RUNS ?= 5
peers-e1000e:
	./hack/peers/e1000e -runs $(PEERS_RUNS)

# mxbench over gomx's USB driver (QEMU's usb-net, libusb) cabled to gomx's
# e1000e, beside mxbench over UDP through the kernel's cdc_ether and e1000e
# on the same devices, in one VM (hack/peers): latency, bandwidth, ratios.
# Needs root; not part of qemu-test. Tens of minutes under TCG.
PEERS_USB_RUNS ?= 3
peers-usb:
	$(GO) run ./hack/peers/cmd/peers-usb -runs $(PEERS_USB_RUNS)

# mxbench jobs under Debian's Open MPI mpirun (openmpi-bin), without the race
# detector: 100 000 mixed messages among 4 ranks (make test runs a quarter of
# them, since -race slows every rank several times) and alltoall as users run it.
test-mpirun:
	$(GO) test -count=1 -run 'TestMpirun' -v ./cmd/mxbench/

# mxbench alltoall among 32, 64 and 128 processes of this host, oversubscribed
# with blocking waits, byte-exact, each rank within 64 MiB of shared memory by
# its transport's own count, a rank killed in a 64-rank job reported with
# nobody hanging, and rank 0 of --procs killed taking the others with it;
# without the race detector (make test runs only the 32).
test-scale:
	$(GO) test -count=1 -run 'TestAlltoallAtScale|TestAlltoallKilledPeer|TestProcsDieWithRankZero' -v ./cmd/mxbench/

# 100 000 mx messages of mixed sizes between the endpoints of two queued
# boards, four queues each, over transport/nic on two emulated 82599s whose
# cable loses, reorders, duplicates and corrupts frames, with a link flap,
# all verified; without the race detector (make test runs 10 000).
test-queued-faults:
	$(GO) test -count=1 -run '^TestQueuedFaultyWire$$' -v ./mx/

# 100 000 messages of mixed sizes, as a ping-pong and as a stream, over every
# wire (in-process, UDP, shared memory, AF_XDP with root) in both wait modes,
# and 500 1 MiB messages over the network wires, with no loss: not one timer
# resend, probe, fast retransmit, answer resend or pull re-request on either
# side; without the race detector (make test runs 20 000 mixed). About 2.5
# minutes at load 19-26 (docs/loss-recovery.md).
test-no-spurious:
	$(GO) test -count=1 -timeout 30m -run '^TestNoSpuriousRecovery$$' -v ./mx/

# mxbench jobs under Debian's Slurm srun, in a private single-node cluster
# that hack/slurm/run.sh installs (as root), starts and stops again:
# `srun -n 4 mxbench alltoall`, `srun -n 2 mxbench pingpong`, and the 100 000
# mixed messages among 4 ranks, all verified.
test-srun:
	GOMX_REQUIRE_SRUN=1 ./hack/slurm/run.sh $(GO) test -count=1 -run 'TestSrun' -v ./cmd/mxbench/

# mx between two processes of this host beside NetPIPE over Open MPI (vader,
# CMA on and off) and over MPICH, in one go: one table with mx's ratios to
# them (8 B latency, 4 MiB bandwidth) and one plot (hack/peers/intranode). Installs the peers from Debian
# as root. A few minutes on a loaded machine; not part of CI.
PEERS_PLOT ?= peers-intranode.svg
peers-intranode:
	$(GO) run ./hack/peers/cmd/peers-intranode -plot $(PEERS_PLOT)

# mxbench alltoall beside MPI_Alltoall of Debian's Open MPI among 4, 8, 16
# and 32 processes of this host, at 8 B, 4 KiB, 64 KiB and 1 MiB: one table
# of t_avg with mx's ratios against their targets, one plot (time per round
# against ranks). mx busy-polls where the host has a core per rank and blocks
# where the job oversubscribes it. Installs Open MPI's compiler wrapper as
# root. Tens of minutes on 2 cores; not part of CI.
A2A_PLOT ?= peers-alltoall.svg
peers-alltoall:
	$(GO) run ./hack/peers/cmd/peers-alltoall -plot $(A2A_PLOT)

# Every benchmark once: proves they run (CI). Use `make bench` for figures.
bench-smoke: hugepages
	$(GO) test -run '^$$' -bench . -benchtime=1x $(PKGS)

# The figures quoted in docs/benchmarks.md.
bench: hugepages
	$(GO) test -run '^$$' -bench 'ChannelBatch32' -benchtime=5000000x ./ioat/
	$(GO) test -run '^$$' -bench 'Copy$$|ColdCopy4MiB' -benchtime=64x ./ioat/
	$(GO) test -run '^$$' -bench 'Overlap' -benchtime=10x ./ioat/
	$(GO) test -run '^$$' -bench 'PingPong' -benchtime=20000x -count=5 ./xdp/
	$(GO) test -run '^$$' -bench 'Stream' -benchtime=300000x -count=5 ./xdp/
	$(GO) test -run '^$$' -bench 'PingPong/loopback/busypoll/8B' -benchtime=200000x -count=5 ./mx/
	GOMX_BENCH_BIND=1 $(GO) test -run '^$$' -bench 'FloorPingPong' -benchtime=20000x -count=5 ./transport/shm/
	GOMX_BENCH_BIND=1 $(GO) test -run '^$$' -bench 'Intranode/shm-procs/rings/.*/8B' -benchtime=20000x -count=5 ./mx/
	$(GO) test -run '^$$' -bench 'ModelPair' -benchtime=200000x -count=5 ./nicdrv/e1000e/
	$(GO) test -run '^$$' -bench 'ReflectorMMIO' -benchtime=1024x ./nicdrv/e1000e/
	$(GO) test -run '^$$' -bench 'Intranode/.*/blocking' -benchtime=500x -count=3 ./mx/
	$(GO) run ./cmd/mxbench pingpong --sizes 8,1K,32K,1M --iterations 20000 --warmup 2000
	$(GO) run ./cmd/mxbench pingpong --transport xdp --sizes 8,1K,32K --iterations 50000 --warmup 2000
	$(GO) run ./cmd/mxbench stream --sizes 4K,64K,1M --iterations 2000
	# Loss recovery in both wait modes, in-process, over UDP and over AF_XDP (root: a veth pair in two
	# namespaces, else UDP and says why) (docs/loss-recovery.md): --loss 0 is the like-for-like lossless row.
	for t in loopback udp xdp; do for w in spin block; do for l in 0 0.001 0.01; do \
		$(GO) run ./cmd/mxbench pingpong --transport $$t --wait $$w --loss $$l --sizes 8,1M --iterations 3000 --baseline=false || exit 1; \
	done; done; done

# A short run of every fuzzer. Budgets are counts, not times: Go 1.26's fuzz
# coordinator can fail a time-boxed run at its deadline with "context deadline
# exceeded" and no crasher (golang/go#75804, fixed in 1.27); -fuzztime Nx
# avoids it. Every pattern is anchored ('^FuzzX$$'): an unanchored -fuzz that
# matches two fuzzers in a package refuses to run. hack/fuzz-listed.sh first
# fails on any fuzzer in the tree that has no line here.
fuzz-smoke:
	bash hack/fuzz-listed.sh
	$(GO) test -run '^$$' -fuzz '^FuzzDescriptor$$' -fuzztime 5000x ./emulated/
	$(GO) test -run '^$$' -fuzz '^FuzzRegisterWrites$$' -fuzztime 5000x ./emulated/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 5000x ./ioat/hw/
	$(GO) test -run '^$$' -fuzz '^FuzzParseOpCap$$' -fuzztime 5000x ./ioat/idxd/
	$(GO) test -run '^$$' -fuzz '^FuzzParseUDP$$' -fuzztime 5000x ./xdp/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEthHeader$$' -fuzztime 5000x ./xdp/
	$(GO) test -run '^$$' -fuzz '^FuzzNetlinkNeighbours$$' -fuzztime 5000x ./xdp/
	$(GO) test -run '^$$' -fuzz '^FuzzRTTTimeout$$' -fuzztime 5000x ./mx/
	$(GO) test -run '^$$' -fuzz '^FuzzFrame$$' -fuzztime 5000x ./mx/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzHandleFrame$$' -fuzztime 5000x ./mx/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeParams$$' -fuzztime 5000x ./cmd/mxbench/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 5000x ./internal/units/
	$(GO) test -run '^$$' -fuzz '^FuzzChecksum$$' -fuzztime 5000x ./internal/crc32c/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 20000x ./mx/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzSack$$' -fuzztime 20000x ./mx/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzRxAccept$$' -fuzztime 20000x ./nicdrv/e1000e/
	$(GO) test -run '^$$' -fuzz '^FuzzPSAccept$$' -fuzztime 20000x ./nicdrv/e1000e/
	$(GO) test -run '^$$' -fuzz '^FuzzPlaceAccept$$' -fuzztime 20000x ./nicdrv/e1000e/
	$(GO) test -run '^$$' -fuzz '^FuzzPlaceWriteBacks$$' -fuzztime 5000x ./nicdrv/e1000e/
	$(GO) test -run '^$$' -fuzz '^FuzzPacketSplitFrame$$' -fuzztime 2000x ./emulated/
	$(GO) test -run '^$$' -fuzz '^FuzzReceive$$' -fuzztime 5000x ./transport/nic/
	$(GO) test -run '^$$' -fuzz '^FuzzReceiveUDP$$' -fuzztime 5000x ./transport/nic/
	$(GO) test -run '^$$' -fuzz '^FuzzParseSize$$' -fuzztime 2000x ./cmd/internal/cache/
	$(GO) test -run '^$$' -fuzz '^FuzzParseRecord$$' -fuzztime 20000x ./transport/shm/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeTable$$' -fuzztime 2000x ./cmd/internal/launch/
	$(GO) test -run '^$$' -fuzz '^FuzzExpandHostlist$$' -fuzztime 20000x ./cmd/internal/launch/
	$(GO) test -run '^$$' -fuzz '^FuzzControl$$' -fuzztime 2000x ./transport/shm/
	$(GO) test -run '^$$' -fuzz '^FuzzProducerControl$$' -fuzztime 2000x ./transport/shm/
	$(GO) test -run '^$$' -fuzz '^FuzzQueueParse$$' -fuzztime 20000x ./transport/shm/
	$(GO) test -run '^$$' -fuzz '^FuzzSharedEntry$$' -fuzztime 2000x ./mx/
	$(GO) test -run '^$$' -fuzz '^FuzzParseNetPIPE$$' -fuzztime 2000x ./hack/peers/intranode/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 2000x ./hack/peers/alltoall/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeLane$$' -fuzztime 20000x ./mx/wire/
	$(GO) test -run '^$$' -fuzz '^FuzzPMIxDecode$$' -fuzztime 2000x ./cmd/internal/launch/
	$(GO) test -run '^$$' -fuzz '^FuzzList$$' -fuzztime 5000x ./mx/internal/ilist/
	$(GO) test -run '^$$' -fuzz '^FuzzRingOracle$$' -fuzztime 2000x ./transport/shm/
	$(GO) test -run '^$$' -fuzz '^FuzzParseAddress$$' -fuzztime 5000x ./pci/
	$(GO) test -run '^$$' -fuzz '^FuzzParseHexAttr$$' -fuzztime 5000x ./vfio/
	$(GO) test -run '^$$' -fuzz '^FuzzParseDecAttr$$' -fuzztime 5000x ./vfio/
	$(GO) test -run '^$$' -fuzz '^FuzzParseIOMMUInfo$$' -fuzztime 5000x ./vfio/
	$(GO) test -run '^$$' -fuzz '^FuzzParseLog$$' -fuzztime 2000x ./hack/qemu/
	$(GO) test -run '^$$' -fuzz '^FuzzParseEnv$$' -fuzztime 5000x ./cmd/internal/mxenv/
	$(GO) test -run '^$$' -fuzz '^FuzzRxWriteBacks$$' -fuzztime 20000x ./nicdrv/ixgbe/
	$(GO) test -run '^$$' -fuzz '^FuzzPlaceWriteBacks$$' -fuzztime 20000x ./nicdrv/ixgbe/
	$(GO) test -run '^$$' -fuzz '^FuzzParseNTB16$$' -fuzztime 20000x ./nicdrv/usbnet/
	$(GO) test -run '^$$' -fuzz '^FuzzNTBRoundTrip$$' -fuzztime 5000x ./nicdrv/usbnet/
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime 20000x ./nicdrv/usbnet/
	$(GO) test -run '^$$' -fuzz '^FuzzParseNotifications$$' -fuzztime 20000x ./nicdrv/usbnet/
	$(GO) test -run '^$$' -fuzz '^FuzzParseMACString$$' -fuzztime 20000x ./nicdrv/usbnet/
	$(GO) test -run '^$$' -fuzz '^FuzzDSARegisters$$' -fuzztime 2000x ./emulated/
	$(GO) test -run '^$$' -fuzz '^FuzzFlowShard$$' -fuzztime 20000x ./emulated/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeCompletion$$' -fuzztime 5000x ./ioat/dsahw/

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck $(PKGS)

# libmyriexpress: MX's C API (include/myriexpress.h, include/mx_extensions.h)
# over gomx, as a shared library C, C++ and Fortran MX programs link to
# (cmd/libmyriexpress, cgo behind the cabi tag; docs/c-api.md). Built into
# $(CABI_DIR)/lib as libopen-mx.so.0 (Open-MX's soname and symbol versions)
# with libopen-mx.so and libmyriexpress.so linking to it, and its headers
# (those two and Open-MX's native open-mx.h) into $(CABI_DIR)/include.
.PHONY: libmyriexpress test-cabi
CABI_DIR ?= build/cabi
CABI_LDFLAGS = -extldflags '-Wl,--version-script=$(CURDIR)/cmd/libmyriexpress/libmyriexpress.version -Wl,-soname,libopen-mx.so.0'
libmyriexpress:
	mkdir -p $(CABI_DIR)/lib
	$(GO) build -tags cabi -buildmode=c-shared -ldflags "$(CABI_LDFLAGS)" -o $(CABI_DIR)/lib/libopen-mx.so.0 ./cmd/libmyriexpress
	rm -f $(CABI_DIR)/lib/libopen-mx.so.h
	ln -sf libopen-mx.so.0 $(CABI_DIR)/lib/libopen-mx.so
	ln -sf libopen-mx.so.0 $(CABI_DIR)/lib/libmyriexpress.so
	mkdir -p $(CABI_DIR)/include
	cp include/myriexpress.h include/mx_extensions.h include/open-mx.h $(CABI_DIR)/include/
	$(GO) build -o $(CABI_DIR)/bin/omx_info ./cmd/omx_info

# The C tests of libmyriexpress (gcc): one process, two processes over
# shared memory and UDP, and C against a Go mxbench both ways, with cgo's
# pointer checks on (GOEXPERIMENT=cgocheck2).
test-cabi:
	./cmd/libmyriexpress/testdata/run.sh $(CABI_DIR)/test $(GO)
