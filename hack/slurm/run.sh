#!/usr/bin/env bash
# hack/slurm/run.sh: run a command inside a private, single-node Slurm
# cluster on this machine, then take the cluster down again.
#
#   hack/slurm/run.sh [COMMAND [ARG...]]      (default: sinfo; srun -n 2 hostname)
#
# What it does, in order:
#  1. installs Debian's slurmctld, slurmd, slurm-client and munge with apt when
#     srun, slurmd, slurmctld or munged is missing (needs root);
#  2. makes a private directory (GOMX_SLURM_DIR, else a new one under /tmp)
#     holding everything of the cluster: a fresh munge key, munged's socket,
#     pid, seed and log, slurm.conf, the controller's state and slurmd's
#     spool, and both daemons' logs;
#  3. writes a minimal slurm.conf: one node, this host under its own name with
#     the CPUs and RealMemory `slurmd -C` finds, one default partition,
#     proctrack/linuxproc, task/none, no accounting, ports SLURM_PORT and
#     SLURM_PORT+1 (default 6817 and 6818, else the next free pair), and a
#     cluster name of its own (gomxPID: Slurm's job ids restart in every
#     cluster, and gomx names a job's bootstrap socket after both);
#  4. starts munged, slurmctld and slurmd in the foreground of background jobs
#     (not through systemd, which Debian's units assume), each bounded by
#     `timeout GOMX_SLURM_TIMEOUT` (default 600 s), and waits (bounded) until
#     sinfo says the node is idle;
#  5. runs COMMAND with SLURM_CONF pointing at the cluster and SLURM_OVERCOMMIT=1
#     (so `srun -n 4` runs four tasks on a node with fewer CPUs, as mpirun
#     --oversubscribe does), and exits with its status;
#  6. on any exit (trap) cancels what jobs remain, stops every daemon it
#     started and any slurmstepd they left (found as the processes holding a
#     file of the private directory), each by its pid, waits for them, fails
#     if one survives, and removes the private directory unless
#     GOMX_SLURM_KEEP=1 (a failed start prints the daemons' logs first).
#
# Nothing outside the private directory is written except by apt; the
# daemons' sockets and ports are the only things other processes can see.
set -euo pipefail

timeout_s=${GOMX_SLURM_TIMEOUT:-600}
port=${SLURM_PORT:-}
if [ -z "$port" ]; then
	# Slurm's usual ports, or the next free pair, so that two private
	# clusters (or a real one) on this host do not meet.
	for p in $(seq 6817 2 6857); do
		if ! ss -Hltn "( sport = :$p or sport = :$((p + 1)) )" | grep -q .; then
			port=$p
			break
		fi
	done
	[ -n "$port" ] || { echo "hack/slurm: ports 6817-6858 all taken: set SLURM_PORT" >&2; exit 2; }
fi

need_install=0
for b in srun sinfo slurmd slurmctld munged mungekey; do
	command -v "$b" >/dev/null || need_install=1
done
if [ "$need_install" = 1 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "hack/slurm: srun, slurmd, slurmctld or munged missing and not root: apt-get install slurmctld slurmd slurm-client munge" >&2
		exit 2
	fi
	echo "hack/slurm: installing slurmctld slurmd slurm-client munge from Debian" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		slurmctld slurmd slurm-client munge >/dev/null
fi
if [ "$(id -u)" != 0 ]; then
	echo "hack/slurm: slurmd must run as root (it starts tasks as the job's user): run as root" >&2
	exit 2
fi

dir=${GOMX_SLURM_DIR:-}
if [ -z "$dir" ]; then
	dir=$(mktemp -d /tmp/gomx-slurm.XXXXXX)
else
	mkdir -p "$dir"
fi
chmod 700 "$dir"
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
chmod 700 "$dir/munge"

pids=()
started=0

# holders prints the processes that hold a file of the private directory
# open: the daemons, and the slurmstepd each job step gets (slurmd starts
# it, it leaves slurmd's process tree, and keeps slurmd's log open).
holders() {
	local d c f
	for d in /proc/[0-9]*; do
		# Only Slurm's and munge's programs: reading every fd of every
		# process on a busy host takes minutes.
		read -r c <"$d/comm" 2>/dev/null || continue
		case "$c" in
		slurm* | munged) ;;
		*) continue ;;
		esac
		for f in "$d"/fd/*; do
			case "$(readlink "$f" 2>/dev/null)" in
			"$dir"/*)
				echo "${d#/proc/}"
				break
				;;
			esac
		done
	done 2>/dev/null | sort -u
}

# stop sends TERM to the given processes, waits up to 10 s for them to go,
# then KILLs what is left.
stop() {
	[ $# -gt 0 ] || return 0
	kill -TERM "$@" 2>/dev/null || true
	local n=0
	while [ $n -lt 100 ]; do
		local alive=0 p
		for p in "$@"; do
			kill -0 "$p" 2>/dev/null && alive=1
		done
		[ $alive = 0 ] && return 0
		sleep 0.1
		n=$((n + 1))
	done
	kill -KILL "$@" 2>/dev/null || true
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	# Let running steps end first, so slurmd can clean up after them.
	if [ "$started" = 1 ]; then
		local jobs
		jobs=$(squeue -h -o %i 2>/dev/null || true)
		if [ -n "$jobs" ]; then
			# shellcheck disable=SC2086
			scancel $jobs 2>/dev/null || true
			local n=0
			while [ -n "$(squeue -h -o %i 2>/dev/null)" ] && [ $n -lt 50 ]; do
				sleep 0.2
				n=$((n + 1))
			done
		fi
	fi
	# The daemons (by their pid files), their timeout wrappers, then
	# anything of this cluster still holding its files (a lingering
	# slurmstepd). Each by its id; every one waited for.
	local daemons=() f
	for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
		[ -s "$f" ] && daemons+=("$(cat "$f")")
	done
	stop "${daemons[@]}" "${pids[@]}"
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		wait "${pids[i]}" 2>/dev/null || true
	done
	# shellcheck disable=SC2046
	stop $(holders)
	if [ "$started" != 1 ] || [ "$rc" != 0 ]; then
		for f in "$dir"/log/*; do
			[ -s "$f" ] || continue
			echo "---- $f (last 30 lines)" >&2
			tail -n 30 "$f" >&2
		done
	fi
	left=$(holders)
	if [ -n "$left" ]; then
		echo "hack/slurm: processes $left still hold $dir" >&2
		[ "$rc" != 0 ] || rc=1
	fi
	if [ "${GOMX_SLURM_KEEP:-0}" = 1 ]; then
		echo "hack/slurm: kept $dir" >&2
	else
		rm -rf "$dir"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# munge: a fresh key private to this cluster, and its own socket.
mungekey --create --keyfile="$dir/munge/munge.key" --force >/dev/null
chmod 600 "$dir/munge/munge.key"
sock="$dir/munge/munge.socket"
timeout "$timeout_s" munged --foreground --force \
	--socket="$sock" --key-file="$dir/munge/munge.key" \
	--pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
	--log-file="$dir/log/munged.log" >>"$dir/log/munged.out" 2>&1 &
pids+=($!)

host=$(hostname -s)
# `slurmd -C` prints this node's line as slurmd sees it: CPUs, sockets,
# cores, threads and RealMemory. Keep the hardware fields, drop UpTime.
nodeline=$(slurmd -C | head -n 1)
hw=$(echo "$nodeline" | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|RealMemory)=' | tr '\n' ' ')

conf="$dir/slurm.conf"
cat >"$conf" <<EOF
# Written by hack/slurm/run.sh for one run; removed afterwards.
ClusterName=gomx$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=5
SchedulerType=sched/builtin
PlugStackConfig=$dir/plugstack.conf
NodeName=$host NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
: >"$dir/plugstack.conf"
export SLURM_CONF="$conf"

# munged answers once its socket exists.
for _ in $(seq 100); do
	[ -S "$sock" ] && break
	sleep 0.1
done
[ -S "$sock" ] || { echo "hack/slurm: munged did not open $sock" >&2; exit 1; }

timeout "$timeout_s" slurmctld -D -i -f "$conf" >>"$dir/log/slurmctld.out" 2>&1 &
pids+=($!)
timeout "$timeout_s" slurmd -D -f "$conf" -N "$host" >>"$dir/log/slurmd.out" 2>&1 &
pids+=($!)

# The node is usable once sinfo calls it idle (at most 60 s).
state=
for _ in $(seq 120); do
	state=$(sinfo -h -n "$host" -o '%T' 2>/dev/null || true)
	[ "$state" = idle ] && break
	sleep 0.5
done
if [ "$state" != idle ]; then
	echo "hack/slurm: node $host is '${state:-unknown}', not idle, after 60 s" >&2
	exit 1
fi
started=1
export SLURM_OVERCOMMIT=1

if [ $# -eq 0 ]; then
	set -- sh -c 'sinfo && srun -n 2 hostname'
fi
set +e
"$@"
rc=$?
set -e
exit "$rc"
