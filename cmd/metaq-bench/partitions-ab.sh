#!/usr/bin/env bash
# Two broker binaries side by side for partitions-ratio.sh's comparison: each runs as its own process on its
# own data folder (group commit, ZooKeeper off) with topics p16 and pN, and the rounds interleave the four runs
# (A p16, B p16, A pN, B pN; the order reverses every round), so both binaries see the same machine from
# minute to minute: on a shared machine the load moves more between two runs of partitions-ratio.sh than
# within one round here. Per round: msgs/s of each topic and their ratio, and the broker's CPU time per
# message (utime+stime from /proc/PID/stat over the measured window, microseconds), for A then B; then per
# binary the medians and minimums. Disk space, retention and the settle step before every run:
# partitions-lib.sh (RETAIN, ROUND_GB, SETTLE...); a round that would not fit the disk is not run.
# RATE=N passes -rate N to metaq-bench (every run at the same put rate).
# Usage: partitions-ab.sh SERVER_A SERVER_B BENCH_BINARY [N [ROUNDS [SECONDS]]]
set -u
A=$1; B=$2; MB=$3; N=${4:-10000}; ROUNDS=${5:-7}; DUR=${6:-8}; WARM=${WARMUP:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
. "$HERE/partitions-lib.sh"
hz=$(getconf CLK_TCK)
out=$(mktemp -d)
# start BINARY: prints "pid port datadir"
start() {
	local port data
	port=$(bash "$ROOT/.ci/freeport.sh")
	data=$(mktemp -d)
	server_ini "$data" "$port" "$N" > "$data/server.ini"
	"$1" start -foreground -f "$data/server.ini" > "$data/server.log" 2>&1 &
	echo "$! $port $data"
}
read -r pa porta da < <(start "$A")
read -r pb portb db < <(start "$B")
# The brokers were started in a subshell (start), so wait cannot wait for them: poll until both have exited
# before their folders go (a broker writes its checkpoint as it stops).
stop() {
	kill -TERM $pa $pb 2>/dev/null
	for _ in $(seq 1 300); do kill -0 $pa 2>/dev/null || kill -0 $pb 2>/dev/null || break; sleep 0.1; done
	rm -rf "$da" "$db" "$out"
}
trap stop EXIT
for port in $porta $portb; do
	for _ in $(seq 1 300); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
done
sleep 1
# run PID PORT TOPIC PARTITIONS: prints "msgs/s cpu_us_per_msg"
run() {
	settle
	"$MB" -addr "127.0.0.1:$2" -topic "$3" -partitions "$4" -size 1024 -producers 4 -inflight 128 ${RATE:+-rate "$RATE"} \
		-duration "${DUR}s" -warmup "${WARM}s" > "$out/mb.out" 2>&1 &
	local mbpid=$!
	sleep "$WARM"
	local c0 c1 msgs rate
	c0=$(awk '{print $14+$15}' "/proc/$1/stat")
	wait $mbpid
	c1=$(awk '{print $14+$15}' "/proc/$1/stat")
	msgs=$(grep -o '^produce: [0-9]*' "$out/mb.out" | awk '{print $2}')
	rate=$(grep -o '= [0-9]* msgs/s' "$out/mb.out" | awk '{print $2}')
	[ -z "$msgs" ] && { cat "$out/mb.out" >&2; echo "0 0"; return; }
	echo "$rate $(awk -v t=$((c1 - c0)) -v m="$msgs" -v hz="$hz" 'BEGIN{printf "%.2f", t*1e6/hz/m}')"
}
echo "A $(basename "$A"), B $(basename "$B"), topics p16 and p$N, $ROUNDS rounds x ${DUR}s (+${WARM}s warm-up) per topic and binary, 1 KiB, 4 producers x 128 in flight"
printf '%-5s %8s %8s %6s %6s %6s | %8s %8s %6s %6s %6s | %s\n' round A:p16/s "A:p$N/s" ratio us/msg "us/msg" B:p16/s "B:p$N/s" ratio us/msg "us/msg" "load (1/5/15 min)"
short=0
for r in $(seq 1 "$ROUNDS"); do
	disk_check "$r" 2 "$da" || { short=1; break; }
	if [ $((r % 2)) = 1 ]; then
		a16=$(run $pa $porta p16 16); b16=$(run $pb $portb p16 16); aN=$(run $pa $porta "p$N" "$N"); bN=$(run $pb $portb "p$N" "$N")
	else
		bN=$(run $pb $portb "p$N" "$N"); aN=$(run $pa $porta "p$N" "$N"); b16=$(run $pb $portb p16 16); a16=$(run $pa $porta p16 16)
	fi
	set -- $a16 $aN $b16 $bN
	kb=$(awk -v a="$1" -v b="$3" -v c="$5" -v d="$7" -v s=$((DUR + WARM)) 'BEGIN{x = (a+b > c+d) ? a+b : c+d; printf "%d", x*s*1.1}')
	[ "$kb" -gt "$round_max_kb" ] && round_max_kb=$kb
	line=$(printf '%-5s %8s %8s %6s %6s %6s | %8s %8s %6s %6s %6s | %s' "$r" "$1" "$3" "$(awk -v x="$3" -v y="$1" 'BEGIN{printf "%.2f", (y>0)?x/y:0}')" "$2" "$4" \
		"$5" "$7" "$(awk -v x="$7" -v y="$5" 'BEGIN{printf "%.2f", (y>0)?x/y:0}')" "$6" "$8" "$(cut -d' ' -f1-3 /proc/loadavg)")
	echo "$line"
	echo "$line" >> "$out/rounds"
done
[ -s "$out/rounds" ] || exit 2
# per binary: column offsets of ratio, CPU p16, CPU pN
for spec in "A 4 5 6" "B 10 11 12"; do
	set -- $spec
	awk -v c="$2" -v u="$3" -v v="$4" -v who="$1" '
		function med(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }; return (n % 2) ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
		{ r[NR] = $c; q[NR] = ($v > 0) ? $u / $v : 0; s[NR] = $u; t[NR] = $v; d[NR] = $v - $u }
		END { n = NR; mr = med(r, n); mq = med(q, n); ms = med(s, n); mt = med(t, n); md = med(d, n)
			printf "%s: ratio median %.2f minimum %.2f; CPU us/msg median p16 %.2f pN %.2f (pN - p16 median %.2f); CPU ratio p16/pN median %.2f minimum %.2f\n", who, mr, r[1], ms, mt, md, mq, q[1] }' "$out/rounds"
done
exit $((short * 2))
