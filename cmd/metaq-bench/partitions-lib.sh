# Shared by partitions-ratio.sh and partitions-ab.sh (sourced, not run): the broker's server.ini, the disk check
# before a round, the settle step between two measured topics, and what is sampled during a measured window.
#
# Disk: 1 KiB puts at 300-400k msgs/s write 3-4.5 GB per topic and 10-s run, so 7 rounds of two topics (four
# runs per round in partitions-ab.sh) do not fit 40-50 GB free. The brokers therefore run with a short
# retention (RETAIN, default 30s: deletePolicy=delete,30s, checked every 10 s by deleteWhen), which removes the
# sealed segments older than that between and during rounds, as a retention pass does in production (it
# trims each partition and writes one checkpoint when a segment goes); RETAIN=off keeps the seeds' 7 days.
# Before every round the free space of the data folders' file system must hold the round (ROUND_GB, default
# 9 per broker and round, or 1.5 times the most one round has written so far, whichever is more) plus
# DISK_RESERVE_GB (default 2): if it does not, the round waits up to 120 s for retention to free it and
# then the script stops with a message naming the folder, what is free and what is needed, after printing
# the rounds it has; a round is never run into a full disk.
#
# Settle: between two measured topics (and before the first) the script waits until the machine's Dirty +
# Writeback (/proc/meminfo) is at most SETTLE_DIRTY_MB (default 256) for up to SETTLE_MAX seconds (default
# 15), then SETTLE seconds more (default 1), so no topic starts on write-back left over by the one before.
# During each measured window Dirty + Writeback is sampled every 0.2 s and its maximum reported (dirty MB),
# with the broker's minor page faults per message (flt/msg).

RETAIN=${RETAIN:-30s}
ROUND_GB=${ROUND_GB:-9}
DISK_RESERVE_GB=${DISK_RESERVE_GB:-2}
SETTLE_DIRTY_MB=${SETTLE_DIRTY_MB:-256}
SETTLE_MAX=${SETTLE_MAX:-15}
SETTLE=${SETTLE:-1}

# server_ini DATA PORT N: prints the broker's server.ini for p16 and pN on PORT with its data in DATA.
server_ini() {
	local ret=()
	[ "$RETAIN" != off ] && ret=(-e "s|^deletePolicy=.*|deletePolicy=delete,$RETAIN|" -e "s|^deleteWhen=.*|deleteWhen=*/10 * * * * ?|")
	sed -e "s|^serverPort=.*|serverPort=$2|" -e "s|^dataPath=.*|dataPath=$1|" -e "s|^zk.zkEnable=.*|zk.zkEnable=false|" \
		"${ret[@]}" "$HERE/metaq-java/server.ini" | grep -v '^;;'
	printf '\n[topic=p16]\nnumPartitions=16\n\n[topic=p%s]\nnumPartitions=%s\n' "$3" "$3"
}

# dirty_kb: the machine's Dirty + Writeback in KiB.
dirty_kb() { awk '/^(Dirty|Writeback):/{s += $2} END{print s}' /proc/meminfo; }

# free_kb DIR: free KiB (for an unprivileged user) on DIR's file system.
free_kb() { df -Pk "$1" | awk 'NR==2{print $4}'; }

# used_kb DIR...: KiB the folders hold.
used_kb() { du -sk "$@" 2>/dev/null | awk '{s += $1} END{print s+0}'; }

# disk_check ROUND BROKERS DIR...: returns 0 when DIR's file system has room for a round of BROKERS brokers
# (waiting up to 120 s for retention), otherwise prints why to stderr and returns 1. round_max_kb is the
# most one broker has written in a round so far (KiB), kept by the caller.
round_max_kb=0
disk_check() {
	local r=$1 brokers=$2; shift 2
	local need_kb=$((ROUND_GB * 1024 * 1024 * brokers)) est=$((round_max_kb * 3 / 2 * brokers))
	[ "$est" -gt "$need_kb" ] && need_kb=$est
	need_kb=$((need_kb + DISK_RESERVE_GB * 1024 * 1024))
	local free i
	for i in $(seq 1 120); do
		free=$(free_kb "$1")
		[ "$free" -ge "$need_kb" ] && return 0
		[ "$RETAIN" = off ] && break
		sleep 1
	done
	echo "partitions: round $r not run: $(awk -v f="$free" 'BEGIN{printf "%.1f", f/1048576}') GB free on the file system of $1, the round needs $(awk -v n="$need_kb" 'BEGIN{printf "%.1f", n/1048576}') GB (ROUND_GB=$ROUND_GB per broker or 1.5 x the largest round so far, + DISK_RESERVE_GB=$DISK_RESERVE_GB; retention RETAIN=$RETAIN): free space, or shorten RETAIN" >&2
	return 1
}

# settle: waits for the machine's write-back to drain (see above).
settle() {
	local i
	for i in $(seq 1 $((SETTLE_MAX * 5))); do
		[ "$(dirty_kb)" -le $((SETTLE_DIRTY_MB * 1024)) ] && break
		sleep 0.2
	done
	sleep "$SETTLE"
}

# sample_dirty FILE: until killed, appends Dirty + Writeback (KiB) every 0.2 s to FILE.
sample_dirty() { while :; do dirty_kb >> "$1"; sleep 0.2; done; }

# minflt PID: the process's minor page faults so far.
minflt() { awk '{print $10}' "/proc/$1/stat"; }

# steal_ticks: the machine's steal time so far (clock ticks, all CPUs; /proc/stat): time the host ran something
# else while this VM had work.
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; }

# reported_kib: memory this VM has handed back to the host so far (virtio free page reporting), 0 without it.
reported_kib() { cat /sys/module/page_reporting/parameters/reported_kib 2>/dev/null || echo 0; }
