#!/usr/bin/env bash
# Runs MetaQ 1.4.6's own integration suite (module metamorphosis-integration-test) against this project's
# broker, with MetaQ's files and port layout unchanged (server1.ini on 8123 and server2.ini on 8124, async
# slaves on 8111-8113, ZooKeeper on localhost:2181). The suite starts its brokers in process; the two
# classes in shim/ stand in for MetaQ's broker (MetaMorphosisBroker) and its plugin wrapper
# (EnhancedBroker) and run metaq-server on each test's ini file instead. Each test class runs in a JVM of
# its own; the last lines printed are one per class: PASS, FAIL (with the counts) or TIMEOUT.
#
# Usage: run.sh LIBDIR [TEST_CLASS...]   (default: every class but the Spring one)
#   LIBDIR      the lib directory build.sh wrote (the MetaQ 1.4.6 client and server jars)
#   METAQ_REPO  a git checkout or bare mirror of github.com/killme2008/Metamorphosis (tag metamorphosis-all-1.4.6)
# Needs javac and Debian's junit4; ports 2181, 8123-8127 and 8111-8117 free on loopback (MetaQ's files
# name them). Starts its own ZooKeeper (Debian's zookeeper package, as .ci/zookeeper.sh does) and stops
# it, and every broker it started, at the end. Not part of CI: it needs the Java client build.
set -euo pipefail
LIB=$(cd "${1:?usage: run.sh LIBDIR [TEST_CLASS...]}" && pwd)
shift
: "${METAQ_REPO:?set METAQ_REPO}"
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../../.." && pwd)
[ -f /usr/share/java/junit4.jar ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq junit4 >&2
for p in 2181 8123 8124 8111 8112 8113; do
	if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
		echo "port $p is taken on loopback; MetaQ's files need it" >&2
		exit 1
	fi
done

W=$(mktemp -d)
ZKDIR=$W/zk
cleanup() {
	for pid in $(pgrep -f "^$W/metaq-server start" || true); do kill "$pid" 2>/dev/null || true; done
	bash "$ROOT/.ci/zookeeper.sh" stop "$ZKDIR" >/dev/null 2>&1 || true
}
trap cleanup EXIT

(cd "$ROOT" && go build -o "$W/metaq-server" ./cmd/metaq-server)
git --git-dir="$METAQ_REPO" archive metamorphosis-all-1.4.6 metamorphosis-integration-test | tar -x -C "$W" 2>/dev/null ||
	git -C "$METAQ_REPO" archive metamorphosis-all-1.4.6 metamorphosis-integration-test | tar -x -C "$W"
IT=$W/metamorphosis-integration-test
CP=$(ls "$LIB"/*.jar | grep -v metaq-failover-driver | paste -sd:):/usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar
mkdir -p "$W/classes" "$W/logs" "$W/home"
# The Spring test needs MetaQ's client-extension module, which build.sh does not build.
javac -nowarn -encoding GBK -d "$W/classes" -cp "$CP" $(find "$HERE/shim" -name '*.java') \
	$(find "$IT/src/test/java" -name '*.java' | grep -v /spring/) 2>&1 | grep -v '^Note:' >&2 || true

bash "$ROOT/.ci/zookeeper.sh" start 2181 "$ZKDIR" >/dev/null

classes=("$@")
if [ ${#classes[@]} -eq 0 ]; then
	while read -r f; do
		c=${f%.class}
		c=${c//\//.}
		case $c in *.BaseMetaTest | *.HABaseMetaTest) continue ;; esac
		classes+=("$c")
	done < <(cd "$W/classes" && find com/taobao/meta/test -name '*Test*.class' ! -name '*$*' | sort)
fi

export METAQ_SERVER=$W/metaq-server METAQ_IT_LOGS=$W/logs
# Every broker runs as MetaQ's files and the defaults say, admin endpoint included (a unix socket in its
# data directory: it takes no port). METAQ_IT_ADMIN, when set, is passed as -admin.
results=()
for c in "${classes[@]}"; do
	log=$W/logs/$c.txt
	set +e
	# user.home: MetaQ's tests keep their data under ~/meta.
	timeout 420 java -Duser.home="$W/home" -cp "$W/classes:$IT/src/test/resources:$CP" org.junit.runner.JUnitCore "$c" >"$log" 2>&1
	rc=$?
	set -e
	if [ $rc -eq 0 ]; then
		results+=("PASS    $c $(grep -E '^OK \(' "$log" | tail -1)")
	elif [ $rc -eq 124 ]; then
		results+=("TIMEOUT $c (log: $log)")
	else
		results+=("FAIL    $c $(grep -E '^Tests run:' "$log" | tail -1) (log: $log)")
	fi
	for pid in $(pgrep -f "^$W/metaq-server start" || true); do kill "$pid" 2>/dev/null || true; done
done
printf '%s\n' "${results[@]}"
echo "logs: $W/logs"
