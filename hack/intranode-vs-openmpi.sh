#!/bin/sh
# intranode-vs-openmpi.sh: 8-byte one-way latency and 4 MiB ping-pong
# bandwidth of NetPIPE over Open MPI (vader BTL: shared memory with CMA) and
# of mx's intra-node paths (BenchmarkIntranode), back to back in one run, so
# the ratios compare like with like on a shared machine. Needs
# netpipe-openmpi and openmpi-bin (apt-get install -y netpipe-openmpi
# openmpi-bin). Usage: hack/intranode-vs-openmpi.sh [benchtime] (default 1s).
# RUNS (default 5) rounds run interleaved; each line prints the median of
# the rounds, and the last lines the ratios of mx's 8-byte latency (p50 and
# mean) and 4 MiB bandwidth to Open MPI's. MODES (default "blocking
# busypoll") chooses mx's wait modes. mx's two processes are bound to one
# CPU each (GOMX_BENCH_BIND=1), as mpirun binds the two NetPIPE ranks;
# BIND=0 leaves every process unbound (mpirun --bind-to none).
set -eu
cd "$(dirname "$0")/.."
bt=${1:-1s}
runs=${RUNS:-5}
modes=${MODES:-blocking busypoll}
bind=${BIND:-1}
mpibind=core
if [ "$bind" = 0 ]; then bind= mpibind=none; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/mx.test" ./mx/
for run in $(seq "$runs"); do
	for size in 8 4194304; do
		mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --bind-to $mpibind --mca btl self,vader \
			NPopenmpi -l $size -u $size -p 0 -o "$tmp/np" >/dev/null 2>&1
		# NetPIPE's columns: bytes, Mbit/s, one-way seconds.
		awk -v s=$size '$1 == s { printf "openmpi-vader/%sB us/oneway %.3f MB/s %.1f\n", $1, $3 * 1e6, $2 / 8 }' "$tmp/np"
	done
	for path in shm-procs/rings shm-procs/cma udp+shm-procs; do
		for mode in $modes; do
			(cd mx && GOMX_BENCH_BIND=$bind "$tmp/mx.test" -test.run '^$' -test.benchtime "$bt" \
				-test.bench "^BenchmarkIntranode\$/^$(echo $path | sed 's/+/\\+/')\$/^$mode\$" 2>/dev/null) |
				# A child's exit message may split a result line: join from
				# the name to the metrics.
				awk '/^BenchmarkIntranode/ { name = $1; line = "" }
				name != "" { line = line " " $0 }
				name != "" && /us\/oneway/ {
					sub(/^BenchmarkIntranode\//, "", name); sub(/-[0-9]+$/, "", name)
					printf "%s", name
					n = split(line, f, /[ \t]+/)
					for (i = 1; i < n; i++) if (f[i+1] ~ /^(p50-us\/oneway|us\/oneway|MB\/s|cma\/op)$/) printf " %s %s", f[i+1], f[i]
					print ""; name = "" }'
		done
	done
done >"$tmp/all"
# Medians per line and metric, then the ratios.
awk '{ for (i = 2; i < NF; i += 2) { k = $1 " " $i; v[k, ++n[k]] = $(i+1); if (!(k in seen)) { seen[k] = 1; order[++m] = k } } }
	function median(k,   i, j, t, c) {
		c = n[k]
		for (i = 1; i <= c; i++) a[i] = v[k, i]
		for (i = 2; i <= c; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return c % 2 ? a[(c+1)/2] : (a[c/2] + a[c/2+1]) / 2
	}
	END {
		for (i = 1; i <= m; i++) { split(order[i], p, " "); med[order[i]] = median(order[i]); printf "%-40s %-14s %10.3f  (median of %d)\n", p[1], p[2], med[order[i]], n[order[i]] }
		lat = med["openmpi-vader/8B us/oneway"]; bw = med["openmpi-vader/4194304B MB/s"]
		for (i = 1; i <= m; i++) {
			split(order[i], p, " ")
			if (p[1] ~ /\/8B$/ && p[1] !~ /^openmpi/ && (p[2] == "p50-us/oneway" || p[2] == "us/oneway") && lat > 0)
				printf "ratio %-34s %-14s %6.2fx Open MPI (%.3f us)\n", p[1], p[2], med[order[i]] / lat, lat
			if (p[1] ~ /\/4194304B$/ && p[1] !~ /^openmpi/ && p[2] == "MB/s" && bw > 0)
				printf "ratio %-34s %-14s %6.2fx Open MPI (%.0f MB/s)\n", p[1], p[2], med[order[i]] / bw, bw
		}
	}' "$tmp/all"
