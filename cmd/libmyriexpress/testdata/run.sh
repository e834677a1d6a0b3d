#!/usr/bin/env bash
# The C tests of libmyriexpress (make test-cabi). Builds the library with
# cgo's full pointer checks (GOEXPERIMENT=cgocheck2: every store of a Go
# pointer into C memory is checked at run time), links mxtest.c against it
# as an MX program links against Open-MX (-lmyriexpress, nothing else),
# and runs: the one-process tests, two processes over shared memory and
# over UDP, and the C program against a Go `mxbench` both ways over both
# paths. Every run is bounded by a timeout. Usage: run.sh BUILD_DIR [GO].
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [GO]}
go=${2:-go}
root=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$build"
build=$(cd "$build" && pwd)
lib=$build/cgocheck2
mkdir -p "$lib"

echo "== libmyriexpress with GOEXPERIMENT=cgocheck2"
(cd "$root" && GOEXPERIMENT=cgocheck2 "$go" build -tags cabi -buildmode=c-shared \
	-ldflags "-extldflags '-Wl,--version-script=$root/cmd/libmyriexpress/libmyriexpress.version -Wl,-soname,libopen-mx.so.0'" \
	-o "$lib/libopen-mx.so.0" ./cmd/libmyriexpress)
rm -f "$lib/libopen-mx.so.h" # Go's own export header, not the API
ln -sf libopen-mx.so.0 "$lib/libopen-mx.so"
ln -sf libopen-mx.so.0 "$lib/libmyriexpress.so"

echo "== the library's go vet (cgo, cabi tag) and Go tests (the request table) with the race detector"
(cd "$root" && "$go" vet -tags cabi ./cmd/libmyriexpress/ && "$go" test -tags cabi -race -count=1 ./cmd/libmyriexpress/)

echo "== mxtest (gcc) and mxbench"
gcc -O2 -Wall -Wextra -Werror -pthread -I"$root/include" -o "$build/mxtest" \
	"$root/cmd/libmyriexpress/testdata/mxtest.c" -L"$lib" -lmyriexpress
(cd "$root" && "$go" build -o "$build/mxbench" ./cmd/mxbench)

export LD_LIBRARY_PATH=$lib
mxtest=$build/mxtest
mxbench=$build/mxbench
t=120 # seconds any one run may take

# The symbol versions a program linked against Open-MX asks for.
syms=$(readelf --dyn-syms -W "$lib/libopen-mx.so.0")
for v in 'mx_open_endpoint@@MX_0.9' 'mx_test@@MX_0.91' 'mx__init_api@@MX_0.92' 'mx_isend@@MX_0.0'; do
	grep -q " $v\$" <<<"$syms" || { echo "libopen-mx.so.0 lacks $v"; exit 1; }
done
if grep -q ' gomx_' <<<"$syms"; then
	echo "libopen-mx.so.0 exports its internal gomx_ symbols"; exit 1
fi
# Every function the three headers declare (not macros or inline
# functions, which the preprocessor and compiler resolve) is defined.
defined=$(awk '$7 != "UND" {sub(/@.*/, "", $8); print $8}' <<<"$syms" | sort -u)
for h in myriexpress.h mx_extensions.h open-mx.h; do
	gcc -E -P -I"$root/include" "$root/include/$h" | tr '\n' ' ' | tr ';' '\n' |
		grep -v 'static inline' | grep -oE '\b(mx|omx)_[a-z0-9_]+ *\(' | sed 's/ *($//'
done | sort -u | grep -v '_t$' >"$build/declared.txt"
missing=$(comm -23 "$build/declared.txt" <(echo "$defined"))
[ -z "$missing" ] || { echo "declared in the headers but not defined by libopen-mx.so.0:" $missing; exit 1; }
echo "libopen-mx.so.0 defines the $(wc -l <"$build/declared.txt") functions the headers declare"

echo "== docs/c-api.md's example"
# The program the page shows is the one built here.
awk '/^## A program/ {on = 1} on && /^```c$/ {inb = 1; next} inb && /^```$/ {exit} inb' "$root/docs/c-api.md" |
	diff - "$root/cmd/libmyriexpress/testdata/example.c" ||
	{ echo "docs/c-api.md's example differs from cmd/libmyriexpress/testdata/example.c"; exit 1; }
gcc -Wall -Werror -I"$root/include" -o "$build/example" "$root/cmd/libmyriexpress/testdata/example.c" -L"$lib" -lmyriexpress
timeout $t "$build/example" | grep -q 'received "hello" (6 bytes)'

echo "== one process"
timeout $t "$mxtest" local
timeout $t "$mxtest" crossing 20000

echo "== Open-MX's native API (open-mx.h, omx_*): one process"
gcc -O2 -Wall -Wextra -Werror -pthread -I"$root/include" -o "$build/omxtest" \
	"$root/cmd/libmyriexpress/testdata/omxtest.c" -L"$lib" -lopen-mx
omxtest=$build/omxtest
timeout $t "$omxtest" local

for path in shm udp; do
	if [ $path = udp ]; then export OMX_DISABLE_SHARED=1; else unset OMX_DISABLE_SHARED; fi
	echo "== two processes over $path: ping-pong and the random loop"
	timeout $t "$mxtest" pair 300
	echo "== two processes over $path through the omx_* names"
	timeout $t "$omxtest" pair 3

	port=$((41000 + RANDOM % 20000))
	echo "== C client -> Go mxbench serve over $path (port $port)"
	GOMX_SHM=$([ $path = udp ] && echo off || echo on) timeout $t "$mxbench" serve --listen 127.0.0.1:$port --once --wait block >"$build/serve.log" 2>&1 &
	srv=$!
	for _ in $(seq 1 600); do grep -q "mxbench serve:" "$build/serve.log" && break; sleep 0.1; done
	timeout $t "$mxtest" mxbench-client 127.0.0.1:$port 100
	wait $srv || { cat "$build/serve.log"; exit 1; }

	port=$((41000 + RANDOM % 20000))
	echo "== Go mxbench pingpong -> C server over $path (port $port)"
	GOMX_BOARDS=udp:127.0.0.1:$port timeout $t "$mxtest" mxbench-server >"$build/cserver.log" 2>&1 &
	srv=$!
	for _ in $(seq 1 600); do grep -q "listening" "$build/cserver.log" && break; sleep 0.1; done
	GOMX_SHM=$([ $path = udp ] && echo off || echo on) timeout $t "$mxbench" pingpong --peer 127.0.0.1:$port \
		--baseline=false --verify --sizes 0,8,4K,64K,1M --iterations 100
	wait $srv || { cat "$build/cserver.log"; exit 1; }
	cat "$build/cserver.log"
done
unset OMX_DISABLE_SHARED

# MX's own test programs (Open-MX's tests/mx) against this library.
# run_mx_tests DIR runs the five programs found in DIR.
run_mx_tests() {
	local dir=$1 p prog rflags sflags port srv
	timeout $t "$dir/mx_msg_loop" -N 1 -E 70000 -M 2 | tail -1
	# program|the receiver's flags|the sender's flags
	for p in "mx_pingpong||-V -E 1100000 -M 4 -N 20" "mx_wait_any_test||" "mx_stream|-v|-V -l 100000 -N 100"; do
		IFS='|' read -r prog rflags sflags <<<"$p"
		port=$((41000 + RANDOM % 20000))
		# shellcheck disable=SC2086 # the flags are words
		GOMX_BOARDS=udp:127.0.0.1:$port timeout $t stdbuf -oL "$dir/$prog" $rflags >"$build/omx.log" 2>&1 &
		srv=$!
		for _ in $(seq 1 600); do grep -q "^Starting" "$build/omx.log" && break; sleep 0.1; done
		# shellcheck disable=SC2086
		timeout $t "$dir/$prog" -d 127.0.0.1:$port $sflags | tail -2
		wait $srv || { cat "$build/omx.log"; exit 1; }
	done
	# Its receiver only sleeps: the sender's twelve threads are the test.
	timeout $t "$dir/mx_wakeup_test" -d 127.0.0.1:1 | tail -1
}

# When a checkout of Open-MX is given (GOMX_OPENMX_SRC): its tests/mx
# built unchanged against gomx's headers, and against Open-MX's own MX
# headers (its ABI), linked to this library.
if [ -n "${GOMX_OPENMX_SRC:-}" ]; then
	src=$GOMX_OPENMX_SRC/tests/mx
	for hdr in "$root/include" "$GOMX_OPENMX_SRC/common/mx"; do
		echo "== Open-MX's tests/mx built against $hdr"
		for p in mx_pingpong mx_msg_loop mx_wait_any_test mx_wakeup_test mx_stream; do
			gcc -O2 -w -I"$hdr" -I"$src" -o "$build/$p" "$src/$p.c" -L"$lib" -lmyriexpress -lpthread
		done
		run_mx_tests "$build"
	done
	# As Open-MX's own make builds them (tests/mx/Makefile.am): through
	# its translation headers, which make every mx_ call a call of the
	# native omx_ API (open-mx.h), linked with -lopen-mx. Its config.h
	# (-imacros) comes from configure; the tests need nothing of it.
	echo "== Open-MX's tests/mx as its make builds them (translation headers, omx_ API)"
	: >"$build/omx_config.h"
	for p in mx_pingpong mx_msg_loop mx_wait_any_test mx_wakeup_test mx_stream; do
		gcc -O2 -w -pthread -I"$GOMX_OPENMX_SRC/common/mx/translate" -I"$GOMX_OPENMX_SRC/common" \
			-imacros "$build/omx_config.h" -o "$build/$p" "$src/$p.c" -L"$lib" -lopen-mx
		nm -D --undefined-only "$build/$p" >"$build/undefined.out"
		grep -q ' omx_' "$build/undefined.out" ||
			{ echo "$p built through the translation headers calls no omx_ function"; exit 1; }
	done
	LD_BIND_NOW=1 run_mx_tests "$build"
fi

# When a directory of those programs already built and linked against
# Open-MX's own library is given (GOMX_OPENMX_BIN): run them unchanged,
# this library taking Open-MX's place through LD_LIBRARY_PATH alone.
# Each must bind libopen-mx.so.0 here and ask it only for versions it
# defines.
if [ -n "${GOMX_OPENMX_BIN:-}" ]; then
	echo "== Open-MX-linked programs in $GOMX_OPENMX_BIN"
	have=$(readelf -V -W "$lib/libopen-mx.so.0" | sed -n '/\.gnu\.version_d/,/\.gnu\.version_r/p')
	for p in mx_pingpong mx_msg_loop mx_wait_any_test mx_wakeup_test mx_stream; do
		bin=$GOMX_OPENMX_BIN/$p
		[ -x "$bin" ] || { echo "GOMX_OPENMX_BIN: no program $bin"; exit 1; }
		# (Into a file: grep -q ends early, and pipefail would count the
		# writer's SIGPIPE as a failure.)
		ldd "$bin" >"$build/ldd.out"
		grep -q "libopen-mx.so.0 => $lib/libopen-mx.so.0" "$build/ldd.out" ||
			{ echo "$p does not bind $lib/libopen-mx.so.0:"; cat "$build/ldd.out"; exit 1; }
		# The versions it needs from libopen-mx.so.0.
		for v in $(readelf -V -W "$bin" | awk '/File: libopen-mx/{f=1; next} /File:/{f=0} f && /Name:/{print $3}'); do
			grep -q "Name: $v\$" <<<"$have" || { echo "$p needs $v, which libopen-mx.so.0 lacks"; exit 1; }
		done
		# Built with Open-MX's in-tree translation headers, it calls the
		# native omx_ API: every omx_ function it needs must be here.
		nm -D --defined-only "$lib/libopen-mx.so.0" >"$build/defined.out"
		for f in $(nm -D --undefined-only "$bin" | awk '$2 ~ /^omx_/ {print $2}'); do
			grep -Eq " ${f%%@*}(@|$)" "$build/defined.out" ||
				{ echo "$p calls $f, which libopen-mx.so.0 lacks"; exit 1; }
		done
	done
	LD_BIND_NOW=1 run_mx_tests "$GOMX_OPENMX_BIN"
fi
echo "test-cabi: ok"
