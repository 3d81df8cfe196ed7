#!/usr/bin/env bash
# Starts the MetaQ 1.4.6 Java broker built by build.sh, in the foreground (exec: the PID is the JVM's, so
# SIGTERM runs MetaQ's shutdown hook). For metaq-bench:
#   metaq-bench -compare metaq-java -metaq-java "$PWD/run.sh BUILDDIR {port} {data} 127.0.0.1:2181"
# Usage: run.sh BUILDDIR PORT DATADIR ZK   (ZK: a running ZooKeeper, e.g. .ci/zookeeper.sh start)
# The config is server.ini beside this script with serverPort, dataPath and zk.zkConnect replaced.
# JVM options: JAVA_OPTS (default -Xms2g -Xmx2g -XX:+UseG1GC).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:?usage: run.sh BUILDDIR PORT DATADIR ZK}
PORT=${2:?port}
DATA=${3:?data dir}
ZK=${4:?ZooKeeper address}
[ -f "$BUILD/lib/classpath.txt" ] || { echo "run build.sh $BUILD first" >&2; exit 1; }
mkdir -p "$DATA"
INI="$DATA/server.ini"
sed -e "s|^serverPort=.*|serverPort=$PORT|" -e "s|^dataPath=.*|dataPath=$DATA|" \
	-e "s|^zk.zkConnect=.*|zk.zkConnect=$ZK|" "$HERE/server.ini" > "$INI"
exec java ${JAVA_OPTS:--Xms2g -Xmx2g -XX:+UseG1GC} -server \
	-Dlog4j.configuration="file:$HERE/log4j.properties" \
	-cp "$(cat "$BUILD/lib/classpath.txt")" \
	com.taobao.metamorphosis.server.MetamorphosisStartup -f "$INI"
