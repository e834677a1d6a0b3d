package main

// columnNotes explains the table's columns; the help of pingpong and
// stream and the table's own footer print it.
const columnNotes = `Columns: size and iters are the message size and the measured iterations.
latency_us is half the mean round trip (pingpong) or us_per_msg the time per
message (stream); MB/s is payload bytes per second / 10^6. errors counts mx
operations that failed (mx resends what the wire loses, so anything but 0
means a message could not be delivered, and the run stops). The udp columns
are the plain UDP-socket exchange of the same size: "udp er" counts datagrams
that never arrived (UDP does not resend: in stream, the receiver's socket
buffer overflowed; in pingpong, a reply did not come within a second and that
round trip was skipped), so a udp figure with errors moved less data than
it seems. "lat x" is mx's latency over the baseline's. Over xdp, the raw
columns are the same exchange on bare AF_XDP sockets, without mx. The last
columns show how mx recovered from losses during the size (both endpoints,
warmup included; only when both sides run in this process): "fast" resends
and pull re-requests made on evidence (later frames arrived), "timer" those
made when a retransmission timeout expired, "tlp" tail-loss probes (the last
frame of the newest unacked message sent again), "dups" duplicates received
(spurious resends, or the wire's --dup), "pull rq" pull-reply frames asked
for again. The copy columns are the payload bytes the CPU copied per payload
byte (mx.CopyStats, warmup included): "a cp/s" on side a's sends (the pinger,
the streamer) and "a cp/r" its receives, "b cp/s" and "b cp/r" side b's. A
send over a copying transport costs 2 (mx builds the frame, the transport
copies it), 3 for an eager message (mx's message buffer first); a large
message sent in place costs 0 (docs/zero-copy.md). A receive costs 1, 2 for an
unexpected message; a copy engine's copies are not the CPU's. In a job of
more than two processes (--procs N, or a launcher's), ranks 0 and 1 measure
while the others only connect to every rank and wait (their boards block
whatever --wait says, so that they stay idle): idle_cpu is the CPUs
those idle ranks used meanwhile (their CPU time over the size's wall time),
which a host with fewer CPUs than processes takes from the pair, and the
JSON's idle_switches their context switches, the mean per idle rank: how
often each woke meanwhile. In a job,
cpu_us and cs are the CPU time and the context switches of ranks 0 and 1
together per message (a round trip is two): what a message costs, which
the wall time of a loaded host blurs. To compare job sizes like for like,
give --bind (ranks 0 and 1 then sit on the first two CPUs at every size,
the waiting ranks on the other CPUs when there are more; by default a job
larger than the host's CPUs runs unbound, and the pair may share a CPU)
and --yield never, or auto (which leaves out the processes blocked in a
wait, so the idle ranks stop counting some 50 ms after they block):
mxbench pingpong --procs N --sizes 8 --wait block --bind --yield never.
`

const pingpongNotes = `Round trips of each size between two endpoints, as omx_perf runs them:
the initiator sends, the responder answers with the same size (or 0 bytes
with --unidirectional). Without --peer both sides run in this process, each
on its own board and goroutine (pinned to its own CPU when busy-polling).
--transport picks the wire: loopback (in-process), udp (kernel sockets on
127.0.0.1, or toward --peer), xdp (AF_XDP on a veth pair mxbench creates in
two network namespaces; needs root, else falls back to udp and says why),
nic (gomx's e1000e or ixgbe driver) or usb (gomx's USB CDC ECM/NCM driver on two
cabled adapters, --usb A,B with an mxbench built by make build-usb, one of
them possibly the PCI address of a vfio-pci NIC the other is cabled to, or
two fakes with --usb fake; spinning boards share the cores with the driver's
pipe goroutines, so --wait block suits it on a small machine). --timeout
bounds every wait: connecting and each size.

--queues N opens each side as a queued board of N NIC queues (mx.NewQueuedBoard,
UDP framing; --transport nic or xdp): a progress thread per queue, each
endpoint's port steered to its queue; over 82599s the threads sleep on
unmoderated MSI-X interrupts (--nic-interrupts=false polls). --bind-app binds
each queue's thread to a CPU and runs each side's goroutine on the CPU
serving its endpoint (docs/nics.md).

--loss, --reorder, --dup and --corrupt make the wire lossy with one seeded
fault model on every transport: the loopback wire injects the faults itself,
and on the others mxbench wraps each board's transport with the same model
(the first board's sends draw from --seed, the second's from --seed+1; with
--peer, this board's sends and receives), so every frame crosses the model
once. The baselines stay lossless. The last line of the table, and the
"faults" object of each JSON row, say what the model did. A fault flag given
at 0 (--loss 0) puts the model in the path with nothing to do, and the
boards resend as soon as on a lossy run: the like-for-like lossless
reference for a lossy figure.

` + columnNotes

const streamNotes = `A window of --window messages in flight from one endpoint to the other;
reports microseconds per message and throughput. The transports and the
client/server mode are those of pingpong.

` + columnNotes

const serveNotes = `The remote side of pingpong and stream for a client in another process or
on another host: it listens with an mx board on --listen (udp) and answers
the client's raw UDP baseline on the next port. Without --once it serves
clients one after the other until interrupted; --timeout gives up on a
client that stops answering.
`
