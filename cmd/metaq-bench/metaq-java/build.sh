#!/usr/bin/env bash
# Builds the MetaQ 1.4.6 Java broker (metamorphosis-commons + metamorphosis-server) with javac, without
# Maven, so that `metaq-bench -compare metaq-java` can run it under the same load as ours (COMPARE.md).
# It also builds the unmodified MetaQ 1.4.6 Java client (metamorphosis-client) and the small failover driver
# in driver/ (a producer and a consumer written against the client's public API), which
# internal/bundle's TestJavaClient* run through a switchover and a failover (METAQ_JAVA_CLIENT=OUTDIR/lib).
#
# Usage: build.sh OUTDIR
# Needs git checkouts (or bare mirrors) of the four projects, named by these variables:
#   METAQ_REPO    github.com/killme2008/Metamorphosis   (tag metamorphosis-all-1.4.6)
#   GECKO_REPO    github.com/killme2008/gecko           (tag gecko-1.1.3, the version the 1.4.6 pom names)
#   ZKCLIENT_REPO github.com/sgroschupf/zkclient        (tag 0.3.0)
#   AVIATOR_REPO  github.com/killme2008/aviatorscript   (tag aviator-2.3.0; MetaQ evaluates every number in
#                                                        server.ini with it, so it cannot be left out)
# Every other jar comes from Debian packages, installed here if missing (newer than the pom's versions;
# none of them is on the put/get path). Output: OUTDIR/lib/*.jar, OUTDIR/lib/classpath.txt (the broker's,
# used by run.sh) and OUTDIR/lib/client-classpath.txt (the client's and the driver's, nothing of the server).
set -euo pipefail
OUT=${1:?usage: build.sh OUTDIR}
: "${METAQ_REPO:?set METAQ_REPO}" "${GECKO_REPO:?set GECKO_REPO}" "${ZKCLIENT_REPO:?set ZKCLIENT_REPO}" "${AVIATOR_REPO:?set AVIATOR_REPO}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
JAVAC="javac --release 8 -nowarn -Xlint:none"

DEBS="default-jdk-headless libcommons-io-java libcommons-logging-java libcommons-cli-java libslf4j-java
liblog4j1.2-java libini4j-java libquartz2-java libprotobuf-java zookeeper libcommons-lang-java
libjackson-json-java libhessian-java libcommons-beanutils-java libcommons-collections3-java"
missing=""
for p in $DEBS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
	echo "installing:$missing" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2
fi
J=/usr/share/java
DEB_JARS="$J/commons-io.jar $J/commons-logging.jar $J/commons-cli.jar $J/slf4j-api.jar $J/slf4j-log4j12.jar
$J/log4j-1.2.jar $J/ini4j.jar $J/quartz2.jar $J/protobuf.jar $J/zookeeper.jar $J/zookeeper-jute.jar
$J/commons-lang.jar $J/jackson-core-asl.jar $J/jackson-mapper-asl.jar $J/hessian.jar $J/commons-beanutils.jar
$J/commons-collections3.jar"

cd "$OUT"
rm -rf src classes lib
mkdir -p src classes lib
extract() { # repo tag dest paths...
	local g=$1 t=$2 d=$3
	shift 3
	mkdir -p "src/$d"
	git -C "$g" archive "$t" "$@" | tar -x -C "src/$d"
}
extract "$METAQ_REPO" metamorphosis-all-1.4.6 metaq metamorphosis-commons metamorphosis-server metamorphosis-client
extract "$GECKO_REPO" gecko-1.1.3 gecko src/main
extract "$ZKCLIENT_REPO" 0.3.0 zkclient src/main
extract "$AVIATOR_REPO" aviator-2.3.0 aviator src/main

# zkclient's embedded test server is written against ZooKeeper 3.3 and nothing in MetaQ uses it.
rm src/zkclient/src/main/java/org/I0Itec/zkclient/ZkServer.java
# Stock 1.4.6 listens on every address and uses hostName only for what it registers in ZooKeeper; bind to
# hostName instead, so a benchmark broker stays on loopback. Start-up only: the put/get path is untouched.
broker=src/metaq/metamorphosis-server/src/main/java/com/taobao/metamorphosis/server/assembly/MetaMorphosisBroker.java
grep -q 'serverConfig.setPort(metaConfig.getServerPort());' "$broker" || { echo "bind edit: anchor not found in $broker" >&2; exit 1; }
sed -i 's|^\( *\)serverConfig.setPort(metaConfig.getServerPort());|&\n\1if (metaConfig.getHostName() != null) {\n\1    serverConfig.setLocalInetSocketAddress(new java.net.InetSocketAddress(metaConfig.getHostName(), metaConfig.getServerPort()));\n\1}|' "$broker"

# The client's Spring helpers need spring-beans, a "provided" dependency of its pom that Debian does not
# package; a client that does not use Spring never loads them. The rest of the client is compiled as it is.
rm -r src/metaq/metamorphosis-client/src/main/java/com/taobao/metamorphosis/client/extension/spring

for j in $DEB_JARS; do
	[ -f "$j" ] || { echo "missing $j" >&2; exit 1; }
	ln -s "$j" lib/
done
classpath() { local cp=""; for j in lib/*.jar; do cp="$cp:$OUT/$j"; done; echo "${cp#:}"; }
build() { # name encoding srcdir resourcedir
	local name=$1 enc=$2 src=$3 res=$4
	mkdir -p "classes/$name"
	find "$src" -name '*.java' > "classes/$name.list"
	echo "compiling $name ($(wc -l < "classes/$name.list") files)"
	$JAVAC -encoding "$enc" -cp "$(classpath)" -d "classes/$name" @"classes/$name.list"
	if [ -d "$res" ]; then
		(cd "$res" && find . -type f ! -name '*.java' -print0 | xargs -0 -r cp --parents -t "$OUT/classes/$name")
	fi
	jar cf "lib/$name.jar" -C "classes/$name" .
}
# The poms declare GBK for gecko and MetaQ.
build gecko-1.1.3 GBK src/gecko/src/main/java src/gecko/src/main/resources
build zkclient-0.3 UTF-8 src/zkclient/src/main/java src/zkclient/src/main/resources
build aviator-2.3.0 UTF-8 src/aviator/src/main/java src/aviator/src/main/resources
build metamorphosis-commons-1.4.6 GBK src/metaq/metamorphosis-commons/src/main/java src/metaq/metamorphosis-commons/src/main/resources
build metamorphosis-server-1.4.6 GBK src/metaq/metamorphosis-server/src/main/java src/metaq/metamorphosis-server/src/main/resources
build metamorphosis-client-1.4.6 GBK src/metaq/metamorphosis-client/src/main/java src/metaq/metamorphosis-client/src/main/resources
build metaq-failover-driver UTF-8 "$HERE/driver" "$HERE/driver"
classpath | tr ':' '\n' | grep -v -e metamorphosis-client -e metaq-failover-driver | paste -sd: > lib/classpath.txt
classpath | tr ':' '\n' | grep -v -e metamorphosis-server -e aviator -e quartz -e ini4j -e commons-cli \
	-e protobuf -e commons-io -e commons-beanutils -e commons-collections | paste -sd: > lib/client-classpath.txt
echo "built: $(ls lib/*.jar | wc -l) jars in $OUT/lib"
