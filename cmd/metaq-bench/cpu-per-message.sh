#!/usr/bin/env bash
# Broker CPU time per message: one run of metaq-bench against a broker started as its own process, with the
# broker's utime+stime read from /proc/PID/stat over the measured window (after the warm-up, and when the
# bench exits). Prints one line:
#   TIME KIND GROUPS PUTS DELIVERED CPU_TICKS LOAD1 msgs/s=PRODUCED/DELIVERED us/put=CPU per produced message
#   us/delivery=CPU per delivered message (0 groups: -) lg-us/put=the load generator's own CPU per produced
#   message | put latency | delivery latency | broker user/system ticks | the load generator's CPU split
#   (user/system, µs per produced message) | the consumers' gets (with records, empty, per delivered message,
#   bytes per answer with records) | the whole machine's split of the measured window (/proc/stat: user,
#   system, interrupts, idle, waiting for I/O, stolen by the host; percent of all CPUs)
# (LOAD1: the 1-minute load average when the round ends; ticks are 1/CLK_TCK s).
# Usage: cpu-per-message.sh KIND GROUPS
#   KIND: a metaq-server binary (its path), or "java" for the MetaQ Java broker (METAQ_JAVA=build dir of
#   metaq-java/build.sh, ZK=a running ZooKeeper). MB=metaq-bench binary. WARMUP, DURATION in seconds.
#   RATE (msgs/s, optional): the producers together put no faster (metaq-bench -rate), so runs with and
#   without consumers can be compared at the same put rate.
#   GROUPS: consumer groups (metaq-bench -groups), each one connection reading every partition, so every
#   message is delivered GROUPS times.
#   GET_WAIT_MS (our broker only; default 500): [limits] getWaitMs, how long a get at the end of its
#   partition waits for records in the broker (0: answered 404 at once, as MetaQ's broker does; set
#   and empty: no [limits] section, for a broker that predates the key).
#   GET_WAIT_MIN_BYTES (our broker only, with GET_WAIT_MS above 0; unset: the broker's default, 262144 since issue 26, 0 on older binaries): [limits]
#   getWaitMinBytes, the bytes a woken held get lingers for, up to getWaitLingerMs (default 5); 0: none.
#   GET_WAIT_LINGER_MS (our broker only, with GET_WAIT_MS above 0; unset: the broker's default, 5): [limits]
#   getWaitLingerMs, how long a woken held get lingers for getWaitMinBytes.
#   SERVER_LOG (optional): keep the broker's log at that path (e.g. with METAQ_STORE_CYCLE_STATS=1s in the
#   environment, our broker logs its group commit cycle's breakdown every second; broker/store/cyclestats.go).
#   MAX_DELAY_FETCH: metaq-bench -max-delay-fetch (unset: its default, 5s, the MetaQ Java consumer's).
#        cpu-per-message.sh disk
#   measures the disk under a fresh temp dir instead: 1 KiB and 1 MiB O_DSYNC writes (dd), to quote beside
#   the rounds (MACHINE-NOTES: the disk's speed moves from day to day).
# Alternate brokers between rounds yourself (broker/store/BENCH.md, "Zero-copy gets").
set -u
KIND=$1
if [ "$KIND" = disk ]; then
	d=$(mktemp -d)
	k=$(dd if=/dev/zero of="$d/f" bs=1k count=4000 oflag=dsync 2>&1 | tail -1)
	rm -f "$d/f"
	m=$(dd if=/dev/zero of="$d/f" bs=1M count=512 oflag=dsync 2>&1 | tail -1)
	rm -rf "$d"
	echo "$(date -u +%H:%M:%S) disk 1KiB-dsync: $k | 1MiB-dsync: $m | load $(cut -d' ' -f1 /proc/loadavg)"
	exit 0
fi
CONS=${2:?usage: cpu-per-message.sh KIND GROUPS}
# machine_split BEFORE AFTER: the whole machine's time between two "cpu" lines of /proc/stat, in percent
# of all its CPUs: whether a round was bound by the cores (little idle) or by something else.
machine_split() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		split(a, x); split(b, y); t = 0
		for (i = 2; i <= 9; i++) { d[i] = y[i] - x[i]; t += d[i] }
		if (t <= 0) { print "machine -"; exit }
		printf "machine user %.0f%% system %.0f%% irq %.0f%% idle %.0f%% iowait %.0f%% steal %.0f%%",
			100 * (d[2] + d[3]) / t, 100 * d[4] / t, 100 * (d[7] + d[8]) / t, 100 * d[5] / t, 100 * d[6] / t, 100 * d[9] / t
	}'
}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MB=${MB:?metaq-bench binary}; WARM=${WARMUP:-5}; DUR=${DURATION:-10}
port=$(bash "$ROOT/.ci/freeport.sh")
data=$(mktemp -d)
if [ "$KIND" = java ]; then
	bash "$HERE/metaq-java/run.sh" "${METAQ_JAVA:?}" "$port" "$data" "${ZK:?}" > "$data/server.log" 2>&1 &
else
	sed -e "s|^serverPort=.*|serverPort=$port|" -e "s|^dataPath=.*|dataPath=$data|" -e "s|^zk.zkEnable=.*|zk.zkEnable=false|" \
		"$HERE/metaq-java/server.ini" | grep -v '^;;' > "$data/server.ini"
	[ -n "${GET_WAIT_MS-500}" ] && printf '\n[limits]\ngetWaitMs=%s\n' "${GET_WAIT_MS-500}" >> "$data/server.ini"
	[ -n "${GET_WAIT_MS-500}" ] && [ -n "${GET_WAIT_MIN_BYTES:-}" ] && printf 'getWaitMinBytes=%s\n' "$GET_WAIT_MIN_BYTES" >> "$data/server.ini"
	[ -n "${GET_WAIT_MS-500}" ] && [ -n "${GET_WAIT_LINGER_MS:-}" ] && printf 'getWaitLingerMs=%s\n' "$GET_WAIT_LINGER_MS" >> "$data/server.ini"
	"$KIND" start -foreground -f "$data/server.ini" > "$data/server.log" 2>&1 &
fi
pid=$!
for _ in $(seq 1 300); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
sleep 1
"$MB" -addr "127.0.0.1:$port" -groups "$CONS" -duration "${DUR}s" -warmup "${WARM}s" -size 1024 ${MAX_DELAY_FETCH:+-max-delay-fetch "$MAX_DELAY_FETCH"} ${RATE:+-rate "$RATE"} > "$data/mb.out" 2>&1 &
mbpid=$!
sleep "$WARM"
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
m0=$(head -1 /proc/stat)
wait $mbpid
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
m1=$(head -1 /proc/stat)
c0=$((u0 + s0)); c1=$((u1 + s1))
load=$(cut -d' ' -f1 /proc/loadavg)
kill -TERM $pid
for _ in $(seq 1 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
puts=$(grep -o '^produce: [0-9]*' "$data/mb.out" | awk '{print $2}')
cons=$(grep -o '^consume: [0-9]*' "$data/mb.out" | awk '{print $2}')
tck=$(getconf CLK_TCK)
echo "$(date -u +%H:%M:%S) $(basename "$KIND") $CONS ${puts:-0} ${cons:-0} $((c1 - c0)) $load $(awk -v p="${puts:-0}" -v c="${cons:-0}" -v t=$((c1 - c0)) -v d="$DUR" -v k="$tck" \
	'BEGIN { printf "msgs/s=%.0f/%.0f us/put=%.2f us/delivery=%s", p/d, c/d, (p ? t/k*1e6/p : 0), (c ? sprintf("%.2f", t/k*1e6/c) : "-") }') lg-us/put=$(grep -o '^process CPU: [0-9.]*' "$data/mb.out" | awk '{print $3}') | $(grep '^put latency' "$data/mb.out") | $(grep '^delivery latency' "$data/mb.out") | broker user/sys ticks $((u1 - u0))/$((s1 - s0)) | lg $(grep -o 'user [0-9.]*, system [0-9.]*' "$data/mb.out") | $(grep '^gets:' "$data/mb.out") | $(machine_split "$m0" "$m1")"
[ -z "$puts" ] && { cat "$data/mb.out"; tail -5 "$data/server.log"; } >&2
[ -n "${SERVER_LOG:-}" ] && cp "$data/server.log" "$SERVER_LOG"
rm -rf "$data"
