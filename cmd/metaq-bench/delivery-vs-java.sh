#!/usr/bin/env bash
# Delivery against the MetaQ Java broker: alternating rounds of cpu-per-message.sh for our broker and the
# Java one, with each number of consumer groups in turn (default 0, 2 and 8: every message delivered that
# many times), ours first in odd rounds and Java first in even ones; the disk measured before the first
# round. Every run's line is printed as it ends, then per number of groups and round the ratio of produced
# msgs/s (ours / Java) and each broker's CPU per delivery over the same round's 0-group run.
# Usage: delivery-vs-java.sh SERVER_BINARY [ROUNDS [GROUPS...]]
#   MB=metaq-bench binary, METAQ_JAVA=build dir of metaq-java/build.sh, ZK=a running ZooKeeper (for Java);
#   WARMUP, DURATION (seconds) and RATE (msgs/s: every run puts at that rate, or slower when a broker
#   cannot keep it, so the CPU a delivery adds is not mixed with a put path running at another rate) as
#   for cpu-per-message.sh.
set -u
SRV=$1; ROUNDS=${2:-3}; shift $(( $# > 1 ? 2 : 1 ))
GROUPS_LIST=${*:-0 2 8}
HERE=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bash "$HERE/cpu-per-message.sh" disk
for r in $(seq 1 "$ROUNDS"); do
	for g in $GROUPS_LIST; do
		if [ $((r % 2)) = 1 ]; then order="$SRV java"; else order="java $SRV"; fi
		for k in $order; do
			line="r$r $(bash "$HERE/cpu-per-message.sh" "$k" "$g")"
			echo "$line"
			echo "$line" >> "$out"
		done
	done
done
# Fields: r TIME KIND GROUPS PUTS DELIVERED TICKS LOAD msgs/s=P/D us/put=X ... (split on = and /, the produced rate is the third piece)
awk -v srv="$(basename "$SRV")" '
	{ split($9, m, "[=/]"); split($10, u, "="); k = ($3 == "java") ? "java" : "ours"
	  rate[$1, $4, k] = m[3]; cpu[$1, $4, k] = u[2]; rounds[$1] = 1; groups[$4] = 1 }
	END {
		for (g in groups) for (r in rounds) {
			line = sprintf("%s groups=%s ours/java msgs/s %.2f", r, g, (rate[r, g, "java"] > 0) ? rate[r, g, "ours"] / rate[r, g, "java"] : 0)
			if (g > 0 && cpu[r, 0, "ours"] != "" && cpu[r, 0, "java"] != "")
				line = line sprintf("; CPU us per delivery over 0 groups: ours %.2f java %.2f", (cpu[r, g, "ours"] - cpu[r, 0, "ours"]) / g, (cpu[r, g, "java"] - cpu[r, 0, "java"]) / g)
			print line
		}
	}' "$out" | sort
