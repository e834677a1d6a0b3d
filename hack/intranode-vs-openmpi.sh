#!/bin/sh
# intranode-vs-openmpi.sh: 8-byte one-way latency and 4 MiB ping-pong
# bandwidth of NetPIPE over Open MPI (vader BTL: shared memory with CMA) and
# of mx's intra-node paths (BenchmarkIntranode), back to back in one run, so
# the ratios compare like with like on a shared machine. Needs
# netpipe-openmpi and openmpi-bin (apt-get install -y netpipe-openmpi
# openmpi-bin). Usage: hack/intranode-vs-openmpi.sh [benchtime] (default 1s).
set -eu
cd "$(dirname "$0")/.."
bt=${1:-1s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for size in 8 4194304; do
	mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader \
		NPopenmpi -l $size -u $size -p 0 -o "$tmp/np" >/dev/null 2>&1
	# NetPIPE's columns: bytes, Mbit/s, one-way seconds.
	awk -v s=$size '$1 == s { printf "openmpi-vader %s B: %.3f us/oneway %.1f MB/s\n", $1, $3 * 1e6, $2 / 8 }' "$tmp/np"
done
for path in shm-procs/rings shm-procs/cma udp+shm-procs; do
	for mode in blocking busypoll; do
		go test -run '^$' -bench "^BenchmarkIntranode\$/^$(echo $path | sed 's/+/\\+/')\$/^$mode\$" \
			-benchtime "$bt" ./mx/ 2>/dev/null |
			# A child's exit message may split a result line: join from the
			# name to the metrics.
			awk '/^BenchmarkIntranode/ { name = $1; line = "" }
				name != "" { line = line " " $0 }
				name != "" && /us\/oneway/ {
					n = split(line, f, /[ \t]+/)
					for (i = 1; i < n; i++) if (f[i+1] == "us/oneway" || f[i+1] == "MB/s" || f[i+1] == "cma/op") printf "%s %s  ", f[i], f[i+1]
					print name; name = "" }'
	done
done
