#!/usr/bin/env bash
# C against Go ping-pong on the same path (docs/c-api.md, "Measured against
# mxbench"): for each path and size, PAIRS interleaved runs of `mxtest
# bench` (C, through the library) and `mxbench pingpong --procs 2` (Go),
# blocking waits on both sides, then the median one-way latency of each
# side and their ratio. Each side's two processes are bound to a CPU each
# (mxbench's default --bind; MXTEST_BIND=1 for mxtest), since two busy
# processes the kernel leaves on one CPU wait for each other's time
# slices; BIND=0 lets the kernel place them. WAIT=spin makes both sides
# busy-poll (OMX_WAITSPIN=1, --wait spin: mxbench's default). CHRT=1
# runs both sides under SCHED_FIFO (chrt -f 10, as root): on a host other
# jobs load, the two processes then have their CPUs as on an idle one
# (other work on those CPUs waits for each run to end). Extra
# environment (GOMX_SLEEP=loop, ...) applies to both sides.
# Usage: bench.sh BUILD_DIR [PAIRS] [PATHS] [SIZES]
# (BUILD_DIR as make test-cabi left it: mxtest, mxbench, cgocheck2/ unused;
# the library from LD_LIBRARY_PATH, default build/cabi/lib).
set -euo pipefail
build=${1:?usage: bench.sh BUILD_DIR [PAIRS] [PATHS] [SIZES]}
pairs=${2:-5}
paths=${3:-"shm udp"}
sizes=${4:-"8 1M"}
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-build/cabi/lib}
wait=${WAIT:-block}
bind=${BIND:-1}
case $wait in
block) cwait=0 ;;
spin) cwait=1 ;;
*) echo "bench.sh: WAIT=$wait: want block or spin" >&2 && exit 2 ;;
esac
case $bind in
0) gobind=false ;;
1) gobind=true ;;
*) echo "bench.sh: BIND=$bind: want 0 or 1" >&2 && exit 2 ;;
esac
prio=()
case ${CHRT:-0} in
0) ;;
1) prio=(chrt -f 10) ;;
*) echo "bench.sh: CHRT=$CHRT: want 0 or 1" >&2 && exit 2 ;;
esac

median() { sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

uptime
echo "waits: $wait; each process bound to a CPU: $gobind; SCHED_FIFO: ${CHRT:-0}"
printf '%-4s %-5s %6s %12s %12s %7s\n' path size iters C_us Go_us C/Go
for path in $paths; do
	if [ "$path" = udp ]; then
		env=(OMX_DISABLE_SHARED=1 GOMX_SHM=off)
	else
		env=(GOMX_SHM=on)
	fi
	for size in $sizes; do
		case $size in
		8) n=3000 bytes=8 ;;
		1M) n=$([ "$path" = udp ] && echo 100 || echo 200) bytes=1048576 ;;
		*) n=1000 bytes=$size ;;
		esac
		cs=() gs=()
		for _ in $(seq 1 "$pairs"); do
			c=$(env "${env[@]}" OMX_WAITSPIN=$cwait MXTEST_BIND=$bind timeout 300 "${prio[@]}" "$build/mxtest" bench "$bytes" "$n" | awk '/^bench:/ {print $4}')
			g=$(env "${env[@]}" timeout 300 "${prio[@]}" "$build/mxbench" pingpong --procs 2 --transport udp --wait "$wait" \
				--bind=$gobind --baseline=false --sizes "$bytes" --iterations "$n" |
				awk '$1 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ {print $4}')
			cs+=("$c") gs+=("$g")
		done
		cm=$(printf '%s\n' "${cs[@]}" | median)
		gm=$(printf '%s\n' "${gs[@]}" | median)
		printf '%-4s %-5s %6d %12.1f %12.1f %7.2f   (C: %s; Go: %s)\n' "$path" "$size" "$n" "$cm" "$gm" \
			"$(awk -v c="$cm" -v g="$gm" 'BEGIN {print c / g}')" "${cs[*]}" "${gs[*]}"
	done
done
uptime
