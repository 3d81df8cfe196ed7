#!/usr/bin/env bash
# Installs the Debian packages the tests use when they are missing:
# ZooKeeper (registry, client and bundle tests), chromium (the dashboard page
# is rendered headless; with CI set its test fails instead of skipping) and
# iproute2 (network namespaces of the WAN tests), python3-kazoo (a python
# producer that takes the contrib clients' path). Needs root only when
# something is missing.
set -euo pipefail
need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v chromium >/dev/null || need+=(chromium)
command -v ip >/dev/null || need+=(iproute2)
/usr/bin/python3 -c "import kazoo" 2>/dev/null || need+=(python3-kazoo)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo ".ci/deps.sh: missing ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
