#!/usr/bin/env bash
# Starts a throw-away ZooKeeper on 127.0.0.1 for the integration tests.
# Usage: .ci/zookeeper.sh start <port> <dir>   prints the address, writes <dir>/zk.pid
#        .ci/zookeeper.sh stop <dir>
# Installs Debian's zookeeper package first when it is missing.
set -euo pipefail
cmd=${1:?start|stop}
case "$cmd" in
start)
	port=${2:?port}; dir=${3:?dir}
	if [ ! -f /usr/share/java/zookeeper.jar ]; then
		if [ "$(id -u)" != 0 ]; then echo "zookeeper is not installed and we are not root" >&2; exit 1; fi
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >&2
	fi
	mkdir -p "$dir/data"
	cat >"$dir/zoo.cfg" <<CFG
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,srvr,mntr
maxClientCnxns=0
CFG
	cp=/usr/share/java/zookeeper.jar
	for j in slf4j-nop log4j-1.2 slf4j-api netty jute zookeeper-jute; do
		for f in /usr/share/java/$j*.jar; do [ -f "$f" ] && cp=$cp:$f; done
	done
	nohup java -Xmx256m -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >"$dir/zk.log" 2>&1 &
	echo $! >"$dir/zk.pid"
	for _ in $(seq 1 150); do
		if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
			echo "127.0.0.1:$port"; exit 0
		fi
		if ! kill -0 "$(cat "$dir/zk.pid")" 2>/dev/null; then cat "$dir/zk.log" >&2; exit 1; fi
		sleep 0.2
	done
	echo "zookeeper did not open 127.0.0.1:$port in 30s" >&2; cat "$dir/zk.log" >&2; exit 1
	;;
stop)
	dir=${2:?dir}
	if [ -f "$dir/zk.pid" ]; then kill "$(cat "$dir/zk.pid")" 2>/dev/null || true; rm -f "$dir/zk.pid"; fi
	;;
esac
