#!/usr/bin/env bash
# Many partitions against 16 through the wire: ONE broker process (its own process, group commit, ZooKeeper
# off) with topics p16 (16 partitions) and pN (N partitions, default 10000), and metaq-bench -addr alternating
# the two topics round by round (the order swaps every round). Per round it prints msgs/s of each topic, the
# ratio pN / p16, the broker's CPU time per message (utime+stime from /proc/PID/stat over the measured
# window; after the slash the user part alone, which leaves out the kernel's copy into the page cache), the
# most Dirty + Writeback (MB, /proc/meminfo) seen during each window, the broker's minor page faults per
# message, and the load average; then the median and minimum of the ratios, and of the CPU ratios (p16's CPU
# per message divided by pN's: 1 when a message costs the broker the same at N partitions as at 16), and each
# topic's median rate when it ran first in its round and when it ran second (the order effect).
# Disk space, retention and the settle step between topics: partitions-lib.sh (RETAIN, ROUND_GB, SETTLE...).
# Usage: partitions-ratio.sh SERVER_BINARY BENCH_BINARY [N [ROUNDS [SECONDS]]]
#   RATE=N passes -rate N to metaq-bench (both topics at the same put rate: profiles and CPU per message
#   compared at the same load).
#   PERF=dir records a perf profile of the broker per topic and round into dir (needs perf).
#   COUNTS=file appends, per topic and round, what the broker's threads did per message (perf stat on the
#   broker: system calls by kind, block requests and bios it issued, buffers it dirtied, ext4 block
#   allocations, page faults, context switches; needs perf and tracefs, mounted here if it is not).
#   LOG=dir keeps the broker's log (server.log) and each measured window (windows: topic, round, start and
#   end as UTC times) in dir, to find what the broker did (rolls, slow fdatasyncs) during a low round.
set -u
SRV=$1; MB=$2; N=${3:-10000}; ROUNDS=${4:-7}; DUR=${5:-8}; WARM=${WARMUP:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/partitions-lib.sh"
port=$(bash "$ROOT/.ci/freeport.sh")
data=$(mktemp -d)
hz=$(getconf CLK_TCK)
server_ini "$data" "$port" "$N" > "$data/server.ini"
"$SRV" start -foreground -f "$data/server.ini" > "$data/server.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; [ -n "${LOG:-}" ] && cp "$data/server.log" "$LOG/"; rm -rf "$data"' EXIT
for _ in $(seq 1 300); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
sleep 1
# run TOPIC PARTITIONS ROUND: prints "msgs/s cpu_us_per_msg/user_us_per_msg dirty_max_mb faults_per_msg"
run() {
	settle
	"$MB" -addr "127.0.0.1:$port" -topic "$1" -partitions "$2" -size 1024 -producers 4 -inflight 128 ${RATE:+-rate "$RATE"} \
		-duration "${DUR}s" -warmup "${WARM}s" > "$data/mb.out" 2>&1 &
	local mbpid=$! perfpid=
	sleep "$WARM"
	local c0 u0; read -r c0 u0 < <(awk '{print $14+$15, $14}' "/proc/$pid/stat")
	local f0; f0=$(minflt $pid)
	local t0; t0=$(date -u +%H:%M:%S.%N)
	local st0 rp0; st0=$(steal_ticks); rp0=$(reported_kib)
	: > "$data/dirty"
	sample_dirty "$data/dirty" &
	local dpid=$!
	local statpid=
	if [ -n "${COUNTS:-}" ]; then
		perf stat -x, -e "$COUNT_EVENTS" -p "$pid" -o "$data/counts" -- sleep "$DUR" > /dev/null 2>&1 &
		statpid=$!
	fi
	if [ -n "${PERF:-}" ]; then
		perf record -q -g -p "$pid" -o "$PERF/$1-r$3.data" -- sleep "$DUR" > /dev/null 2>&1 &
		perfpid=$!
	fi
	wait $mbpid
	local c1 u1; read -r c1 u1 < <(awk '{print $14+$15, $14}' "/proc/$pid/stat")
	local f1; f1=$(minflt $pid)
	local st1 rp1; st1=$(steal_ticks); rp1=$(reported_kib)
	echo "$1 $3 steal $(awk -v s=$((st1 - st0)) -v hz="$hz" -v d="$DUR" 'BEGIN{printf "%.1f", s/hz/d*100}')% reported $(((rp1 - rp0) / 1024)) MB" >> "$data/extra"
	kill $dpid; wait $dpid 2>/dev/null
	[ -n "${LOG:-}" ] && echo "$1 $3 ${t0:0:12} $(date -u +%H:%M:%S.%3N)" >> "$LOG/windows"
	[ -n "$perfpid" ] && wait $perfpid
	local msgs; msgs=$(grep -o '^produce: [0-9]*' "$data/mb.out" | awk '{print $2}')
	echo "$1 $3 load generator $(grep -o '^process CPU: [0-9.]*' "$data/mb.out" | awk '{print $3}') us/msg" >> "$data/extra"
	if [ -n "$statpid" ]; then
		wait $statpid
		awk -F, -v m="${msgs:-0}" -v t="$1" -v r="$3" 'BEGIN{printf "%s round %s per message:", t, r} /^[0-9]/{sub(/^[a-z0-9_]+:(sys_enter_)?/, "", $3); printf " %s %.4f", $3, (m>0)?$1/m:0} END{print ""}' "$data/counts" >> "$COUNTS"
	fi
	local rate; rate=$(grep -o '= [0-9]* msgs/s' "$data/mb.out" | awk '{print $2}')
	[ -z "$msgs" ] && { cat "$data/mb.out" >&2; echo "0 0/0 0 0"; return; }
	echo "$rate $(awk -v t=$((c1 - c0)) -v u=$((u1 - u0)) -v m="$msgs" -v hz="$hz" 'BEGIN{printf "%.2f/%.2f", t*1e6/hz/m, u*1e6/hz/m}')" \
		"$(sort -n "$data/dirty" | tail -1 | awk '{printf "%d", $1/1024}')" "$(awk -v f=$((f1 - f0)) -v m="$msgs" 'BEGIN{printf "%.3f", f/m}')"
}
COUNT_EVENTS=raw_syscalls:sys_enter,syscalls:sys_enter_fdatasync,syscalls:sys_enter_pwrite64,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_pread64,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep,block:block_rq_issue,block:block_bio_queue,block:block_dirty_buffer,ext4:ext4_mballoc_alloc,page-faults,context-switches
if [ -n "${COUNTS:-}" ] && [ ! -d /sys/kernel/tracing/events/syscalls ]; then
	mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || echo "COUNTS: no tracefs at /sys/kernel/tracing: the syscall and block counts will be missing" >&2
fi
echo "broker $(basename "$SRV"), topics p16 and p$N, $ROUNDS rounds x ${DUR}s (+${WARM}s warm-up), 1 KiB, 4 producers x 128 in flight, retention $RETAIN, settle: Dirty+Writeback <= ${SETTLE_DIRTY_MB} MB (at most ${SETTLE_MAX} s) + ${SETTLE} s"
printf '%-6s %-7s %10s %10s %7s %14s %14s %11s %11s %s\n' round first p16/s "p$N/s" ratio "p16 us/msg" "p$N us/msg" "dirty MB" "flt/msg" "load (1/5/15 min)"
# Pages the guest handed back to the host (virtio free page reporting): the page cache taking them again makes
# the kernel's copy of each write several times dearer (cmd/metaq-bench/BENCH.md).
rep=/sys/module/page_reporting/parameters/reported_kib
[ -r $rep ] && echo "free page reporting: $(cat $rep) KiB reported so far" || true
ratios=()
cpuratios=()
orders=() # per round: "p16 rate when first|second" "pN rate when first|second"
summary() {
	[ ${#ratios[@]} = 0 ] && return
	printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "ratio median %.2f  minimum %.2f  (%d rounds)\n", m, a[1], NR}'
	printf '%s\n' "${cpuratios[@]}" | sort -n | awk -v n="$N" -v each="${cpuratios[*]}" '{a[NR]=$1} END{m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "broker CPU per message p16 / p%s: median %.2f  minimum %.2f  (rounds: %s)\n", n, m, a[1], each}'
	printf '%s\n' "${orders[@]}" | awk '
		function med(k,   n, i, j, t, a) { n = split(v[k], a, " "); for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }; return n ? ((n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2) : 0 }
		{ v[$1 " " $2] = v[$1 " " $2] " " $3 }
		END { for (k in v) seen[k] = 1
			printf "order effect, median msgs/s when first / second in the round:"
			for (t = 0; t < 2; t++) { name = t ? "pN" : "p16"; printf "  %s %d / %d", name, med(name " first"), med(name " second") }
			printf "\n" }'
}
for r in $(seq 1 "$ROUNDS"); do
	if ! disk_check "$r" 1 "$data"; then
		summary
		exit 2
	fi
	if [ $((r % 2)) = 1 ]; then
		a=$(run p16 16 "$r"); b=$(run "p$N" "$N" "$r"); first=p16
		orders+=("p16 first ${a%% *}" "pN second ${b%% *}")
	else
		b=$(run "p$N" "$N" "$r"); a=$(run p16 16 "$r"); first="p$N"
		orders+=("pN first ${b%% *}" "p16 second ${a%% *}")
	fi
	set -- $a $b
	kb=$(awk -v x="$1" -v y="$5" -v d=$((DUR + WARM)) 'BEGIN{printf "%d", (x+y)*d*1.1}')
	[ "$kb" -gt "$round_max_kb" ] && round_max_kb=$kb
	ratio=$(awk -v x="$5" -v y="$1" 'BEGIN{printf "%.2f", (y>0)?x/y:0}')
	ratios+=("$ratio")
	cpuratios+=("$(awk -v x="${2%%/*}" -v y="${6%%/*}" 'BEGIN{printf "%.2f", (y>0)?x/y:0}')")
	printf '%-6s %-7s %10s %10s %7s %14s %14s %11s %11s %s\n' "$r" "$first" "$1" "$5" "$ratio" "$2" "$6" "$3/$7" "$4/$8" "$(cut -d' ' -f1-3 /proc/loadavg)"
done
summary
[ -s "$data/extra" ] && { echo "per window: steal (percent of one CPU, host time taken from this VM), memory reported to the host (MB), the load generator's CPU per message:"; paste -sd' ' "$data/extra" | sed -e 's/ \(p[0-9]* [0-9]* steal\)/\n\1/g' -e 's/ p[0-9]* [0-9]* load generator/, load generator/g'; }
[ -r $rep ] && echo "free page reporting: $(cat $rep) KiB reported so far" || true
