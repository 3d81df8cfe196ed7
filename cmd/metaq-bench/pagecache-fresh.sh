#!/usr/bin/env bash
# What the kernel's copy into the page cache costs by where the pages come from (partitions-ratio.sh's rounds
# swing with it): 1 GiB written with dd (1 MiB writes, no fsync) over a cached file, into a new file right
# after a cached 1 GiB file was deleted (pages just freed), and into a new file 15 s after one was deleted (on a
# VM with free page reporting, pages handed back to the host meanwhile). Prints system and elapsed seconds of
# each write and the memory reported to the host. Needs 2 GiB free in DIR (default a temporary folder under
# /tmp; give one on the broker's data file system).
# Usage: pagecache-fresh.sh [DIR [ROUNDS]]
set -u
d=$(mktemp -d "${1:-/tmp}/pagecache-fresh.XXXXXX") || exit 1
trap 'rm -rf "$d"' EXIT
rep=/sys/module/page_reporting/parameters/reported_kib
reported() { cat $rep 2>/dev/null || echo 0; }
# w FILE [CONV]: "system_s elapsed_s" of writing 1 GiB to FILE.
w() { /usr/bin/time -f "%S %e" dd if=/dev/zero of="$1" bs=1M count=1024 ${2:+conv=$2} status=none 2>&1 | tail -1; }
echo "system s / elapsed s per 1 GiB written (and MB reported to the host)"
for i in $(seq 1 "${2:-3}"); do
	dd if=/dev/zero of="$d/a" bs=1M count=1024 status=none; sync
	echo "round $i overwrite cached: $(w "$d/a" notrunc)"; sync
	r0=$(reported); rm -f "$d/a"
	echo "round $i new file right after deleting a cached one: $(w "$d/b") (reported during: $((($(reported) - r0) / 1024)) MB)"; sync
	rm -f "$d/b"; r0=$(reported); sleep 15
	echo "round $i new file 15 s after deleting (reported meanwhile: $((($(reported) - r0) / 1024)) MB): $(w "$d/c")"; sync; rm -f "$d/c"
done
