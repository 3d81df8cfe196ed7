#!/usr/bin/env bash
# The recommended three-site layout of deploy/ on one machine, for learning
# and for the tests: bj runs the masters of brokerIds 1 and 2, hf and gz a
# slave of each, every site with
#   - its own ZooKeeper (one node per site; deploy/zookeeper shows three),
#   - its own NATS server with JetStream, joined to the other sites' by
#     gateways as deploy/nats configures it,
#   - two metaq-server bundles (<site>-1 and <site>-2) running
#     deploy/common/server.ini byte for byte, each with an overlay (site.ini)
#     like deploy/<site>-<n>/site.ini on loopback ports that do not clash,
# and the secrets of "Securing the links between sites": the replication
# secret, a CA and one certificate per bundle for mutual TLS (openssl), the
# gossip key, a configsync signing key trusted by every site, a dashboard
# token. Everything lives under one directory; nothing is written elsewhere.
#
# usage: deploy/local-three-sites.sh up|down|status|layout [DIR]
#   DIR          default $METAQ_LOCAL_DIR, else ./local-sites
#   METAQ_PORT_BASE  first port (default 28000); site i uses base+20*i .. +19;
#                up refuses a base whose ports overlap the kernel's ephemeral
#                range (ip_local_port_range) unless METAQ_PORT_EPHEMERAL_OK=1
#   METAQ_BIN    directory holding metaq-server, configsync, metaq and
#                nats-server (default: built into DIR/bin with go build)
#
# up prints how to reach each site and writes DIR/env (source it for the
# commands); down stops every process it started (by the pids it recorded)
# and removes DIR. layout writes the files up writes for the bundles
# (secrets, certificates, server.ini, site.ini, async_slave.properties) and
# starts nothing: the fault-schedule harness (internal/faultsched) starts
# the processes itself, behind its link proxies.
set -euo pipefail

cmd=${1:-}
dir=${2:-${METAQ_LOCAL_DIR:-./local-sites}}
repo=$(cd "$(dirname "$0")/.." && pwd)
base=${METAQ_PORT_BASE:-28000}
sites=(bj hf gz)
hosts=(bj-1 bj-2 hf-1 hf-2 gz-1 gz-2)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

# port SITE OFFSET: the site's port at that offset.
port() {
	local i
	case "$1" in bj) i=0 ;; hf) i=1 ;; gz) i=2 ;; esac
	echo $((base + 20 * i + $2))
}
zk_port() { port "$1" 0; }
nats_port() { port "$1" 1; }
nats_cluster_port() { port "$1" 2; }
nats_gateway_port() { port "$1" 3; }
# hport HOST OFFSET: a bundle's port; <site>-1 uses the site's offsets
# 10-13, <site>-2 14-17. (Its admin endpoint is a unix socket in its data
# directory: no port.)
hport() { port "${1%-*}" $((10 + 4 * (${1#*-} - 1) + $2)); }
metaq_port() { hport "$1" 0; }
repl_port() { hport "$1" 1; }
gossip_port() { hport "$1" 2; }
dash_port() { hport "$1" 3; }

log() { echo "local-three-sites: $*" >&2; }
die() { log "$*"; exit 1; }

wait_port() { # host:port seconds what [log file]
	local hp=$1 n=$(($2 * 5))
	for _ in $(seq 1 "$n"); do
		if (exec 3<>"/dev/tcp/${hp%:*}/${hp#*:}") 2>/dev/null; then return 0; fi
		sleep 0.2
	done
	if [ -n "${4:-}" ] && [ -s "$4" ]; then
		log "the last lines of $4:"
		tail -n 5 "$4" >&2
	fi
	die "$3 did not open $hp in $2 s${4:+ (its log: $4)}"
}

build() {
	if [ -n "${METAQ_BIN:-}" ]; then
		bin=$METAQ_BIN
		# layout runs configsync (keygen) only; up runs all four.
		local b need=(configsync)
		[ "$cmd" != up ] || need=(metaq-server configsync metaq nats-server)
		for b in "${need[@]}"; do
			[ -x "$bin/$b" ] || die "METAQ_BIN=$bin has no $b ($cmd needs ${need[*]}; unset METAQ_BIN to build them)"
		done
		return
	fi
	bin=$dir/bin
	mkdir -p "$bin"
	log "building metaq-server, configsync, metaq and nats-server into $bin"
	(cd "$repo" && go build -o "$bin/" ./cmd/metaq-server ./cmd/configsync ./cmd/metaq &&
		go build -o "$bin/nats-server" github.com/nats-io/nats-server/v2)
}

# certs: one CA, and one certificate per bundle for server and client use
# (extendedKeyUsage = serverAuth, clientAuth), as deploy/README.md asks.
certs() {
	local ca=$dir/ca
	mkdir -p "$ca"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
		-subj "/CN=metaq local CA" -keyout "$ca/ca.key" -out "$ca/ca.crt" 2>/dev/null
	for h in "${hosts[@]}"; do
		local tls=$dir/$h/conf/tls
		mkdir -p "$tls"
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=metaq-${h#*-}.${h%-*}" \
			-keyout "$tls/$h.key" -out "$tls/$h.csr" 2>/dev/null
		printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$tls/ext.cnf"
		openssl x509 -req -in "$tls/$h.csr" -CA "$ca/ca.crt" -CAkey "$ca/ca.key" -CAcreateserial \
			-days 30 -extfile "$tls/ext.cnf" -out "$tls/$h.crt" 2>/dev/null
		cp "$ca/ca.crt" "$tls/ca.crt"
		rm -f "$tls/$h.csr" "$tls/ext.cnf"
		chmod 600 "$tls/$h.key"
	done
}

start_zookeeper() {
	local s=$1
	bash "$repo/.ci/zookeeper.sh" start "$(zk_port "$s")" "$dir/zk-$s" >/dev/null
}

start_nats() {
	local s=$1 d=$dir/nats-$s gws=""
	mkdir -p "$d/jetstream"
	for o in "${sites[@]}"; do
		gws="$gws    { name: $o, urls: [ nats://127.0.0.1:$(nats_gateway_port "$o") ] }
"
	done
	# deploy/nats/nats-server.conf with one server per site on loopback.
	cat >"$d/nats-server.conf" <<EOF
server_name: nats-1-$s
listen: 127.0.0.1:$(nats_port "$s")
jetstream {
  store_dir: $d/jetstream
}
cluster {
  name: $s
  listen: 127.0.0.1:$(nats_cluster_port "$s")
  # deploy/ lists the site's other two servers; here a site has one, and
  # JetStream's cluster mode wants a route: the server's own is ignored.
  routes: [ nats-route://127.0.0.1:$(nats_cluster_port "$s") ]
}
gateway {
  name: $s
  listen: 127.0.0.1:$(nats_gateway_port "$s")
  gateways: [
$gws  ]
}
EOF
	nohup "$bin/nats-server" -c "$d/nats-server.conf" >"$d/nats.log" 2>&1 &
	echo $! >"$d/nats.pid"
}

# overlay HOST: site.ini of <site>-<n>, the shape of deploy/<site>-<n>/site.ini.
overlay() {
	local h=$1 s=${1%-*} n=${1#*-} conf=$dir/$1/conf join=""
	for o in bj-1 bj-2 hf-1 gz-1; do join="$join${join:+,}127.0.0.1:$(gossip_port "$o")"; done
	cat >"$conf/site.ini" <<EOF
;; Overlay of broker $n at $s on this machine (compare deploy/$h/site.ini).
[system]
brokerId=$n
hostName=127.0.0.1
serverPort=$(metaq_port "$h")
dashboardHttpPort=$(dash_port "$h")
dataPath=$dir/$h/data

[zookeeper]
zk.zkConnect=127.0.0.1:$(zk_port "$s")

[site]
name=$s
forwardPuts=true
dashboardAddr=127.0.0.1:$(dash_port "$h")
token=$token

[replication]
listen=127.0.0.1:$(repl_port "$h")
secretFile=$conf/replication.key
tlsCert=$conf/tls/$h.crt
tlsKey=$conf/tls/$h.key
tlsCA=$conf/tls/ca.crt

[gossip]
bind=127.0.0.1:$(gossip_port "$h")
advertise=127.0.0.1:$(gossip_port "$h")
join=$join
key=$gossip_key

[nats]
url=nats://127.0.0.1:$(nats_port "$s")
agent=$h
trustedKeys=$push_pub
EOF
	if [ "$s" != bj ]; then
		# deploy/<site>-<n>/async_slave.properties, pointed at bj-<n>'s listener.
		sed -e "s#^masterAddress=.*#masterAddress=127.0.0.1:$(repl_port "bj-$n")#" \
			-e "s#/etc/metaq/tls/#$conf/tls/#" \
			"$repo/deploy/$h/async_slave.properties" >"$conf/async_slave.properties"
	fi
}

start_bundle() {
	local h=$1 conf=$dir/$1/conf
	local args=(start)
	[ "${h%-*}" = bj ] || args+=(slave -s "$conf/async_slave.properties")
	"$bin/metaq-server" "${args[@]}" -f "$conf/server.ini" -logdir "$dir/$h/logs" >/dev/null ||
		{ tail -n 30 "$dir/$h/logs/"*.log >&2 || true; die "metaq-server $h did not start"; }
}

# start_bundles HOST...: in parallel; fails if one does.
start_bundles() {
	local pids=() p rc=0
	for h in "$@"; do
		start_bundle "$h" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	[ $rc -eq 0 ] || die "a bundle did not start"
}

# files: the layout's directories, secrets and configuration files.
files() {
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	build
	for h in "${hosts[@]}"; do mkdir -p "$dir/$h/conf" "$dir/$h/logs"; done

	log "secrets: replication secret, CA and certificates, gossip key, configsync key, dashboard token"
	certs
	local secret
	secret=$(openssl rand -hex 32)
	gossip_key=$(head -c32 /dev/urandom | base64)
	token=$(openssl rand -hex 32)
	echo "$token" >"$dir/token"
	chmod 600 "$dir/token"
	push_pub=$("$bin/configsync" keygen -o "$dir/push.key" | sed -n 's/^public key: //p')
	[ -n "$push_pub" ] || die "configsync keygen printed no public key"
	for h in "${hosts[@]}"; do
		local conf=$dir/$h/conf
		(umask 077 && echo "$secret" >"$conf/replication.key")
		cp "$repo/deploy/common/server.ini" "$conf/server.ini"
		overlay "$h"
	done
}

layout() {
	[ ! -e "$dir/bj-1/conf/site.ini" ] || die "$dir already holds a layout"
	files
	log "layout written under $dir (nothing started)"
}

# ephemeral_clash: says so when the layout's ports (base .. base+59) overlap
# the kernel's range of ephemeral ports: any outgoing connection on this
# machine may take one of them as its local port between the check in up
# and the listener's bind (seen: NATS's "bind: address already in use").
ephemeral_clash() {
	local lo hi f=/proc/sys/net/ipv4/ip_local_port_range
	[ -r "$f" ] || return 1
	read -r lo hi <"$f"
	[ "$base" -le "$hi" ] && [ $((base + 59)) -ge "$lo" ] || return 1
	echo "ports $base-$((base + 59)) overlap the ephemeral port range $lo-$hi"
}

up() {
	[ ! -e "$dir/env" ] || die "$dir already holds a layout: run '$0 down $dir' first"
	local clash
	if clash=$(ephemeral_clash) && [ -z "${METAQ_PORT_EPHEMERAL_OK:-}" ]; then
		die "$clash: outgoing connections of any process can take them while the layout starts; choose a METAQ_PORT_BASE whose 60 ports lie outside it (the default 28000 does), or METAQ_PORT_EPHEMERAL_OK=1 to try anyway"
	fi
	for s in "${sites[@]}"; do
		for off in 0 1 2 3 10 11 12 13 14 15 16 17; do
			if (exec 3<>"/dev/tcp/127.0.0.1/$(port "$s" "$off")") 2>/dev/null; then
				die "port $(port "$s" "$off") is in use: set METAQ_PORT_BASE"
			fi
		done
	done
	files

	log "ZooKeeper and NATS per site"
	for s in "${sites[@]}"; do start_zookeeper "$s" & done
	wait
	for s in "${sites[@]}"; do start_nats "$s"; done
	for s in "${sites[@]}"; do wait_port "127.0.0.1:$(nats_port "$s")" 10 "NATS at $s" "$dir/nats-$s/nats.log"; done

	cat >"$dir/env" <<EOF
# source this file: the commands and this layout's addresses.
export PATH="$bin:\$PATH"
export METAQ_TOKEN=$token
export METAQ_CONFIGSYNC_KEY=$dir/push.key
export METAQ_CONF=$dir/bj-1/conf/server.ini
METAQ_LOCAL_DIR=$dir
BJ_ZK=127.0.0.1:$(zk_port bj) HF_ZK=127.0.0.1:$(zk_port hf) GZ_ZK=127.0.0.1:$(zk_port gz)
BJ_BROKER=127.0.0.1:$(metaq_port bj-1) HF_BROKER=127.0.0.1:$(metaq_port hf-1) GZ_BROKER=127.0.0.1:$(metaq_port gz-1)
BJ_BROKER2=127.0.0.1:$(metaq_port bj-2) HF_BROKER2=127.0.0.1:$(metaq_port hf-2) GZ_BROKER2=127.0.0.1:$(metaq_port gz-2)
BJ_DASHBOARD=127.0.0.1:$(dash_port bj-1) HF_DASHBOARD=127.0.0.1:$(dash_port hf-1) GZ_DASHBOARD=127.0.0.1:$(dash_port gz-1)
BJ_DASHBOARD2=127.0.0.1:$(dash_port bj-2) HF_DASHBOARD2=127.0.0.1:$(dash_port hf-2) GZ_DASHBOARD2=127.0.0.1:$(dash_port gz-2)
EOF

	log "bundles: bj's two masters, then the slaves of both at hf and gz"
	start_bundles bj-1 bj-2
	start_bundles hf-1 hf-2 gz-1 gz-2

	# JetStream elects its meta leader across the gateways within seconds;
	# until then the bucket cannot be opened, so the first push may retry.
	log "configsync: publishing deploy/common/server.ini as the first version"
	local tries=0
	until "$bin/configsync" push -f "$dir/bj-1/conf/server.ini" -key "$dir/push.key" \
		-nats "nats://127.0.0.1:$(nats_port bj)" -sites "$(IFS=,; echo "${hosts[*]}")" -timeout 20s >"$dir/configsync-push.log" 2>&1; do
		tries=$((tries + 1))
		[ "$tries" -lt 4 ] || { cat "$dir/configsync-push.log" >&2; die "configsync push failed"; }
		sleep 1
	done

	cat <<EOF
three sites, two bundles each, up under $dir (source $dir/env for the commands below)
  bundle  ZooKeeper        MetaQ            dashboard (token in $dir/token)
$(for h in "${hosts[@]}"; do printf '  %-7s 127.0.0.1:%-6s 127.0.0.1:%-6s http://127.0.0.1:%s/\n' "$h" "$(zk_port "${h%-*}")" "$(metaq_port "$h")" "$(dash_port "$h")"; done)
try:
  metaq produce -zk \$BJ_ZK -topic orders -n 100
  metaq consume -zk \$HF_ZK -root /meta-view-hf -topic orders -n 100     # hf's replica, as a Java consumer at hf
  metaq lag -addr \$BJ_DASHBOARD
  configsync status
  $0 down $dir
EOF
}

down() {
	[ -d "$dir" ] || { log "nothing at $dir"; return 0; }
	dir=$(cd "$dir" && pwd)
	bin=${METAQ_BIN:-$dir/bin}
	local pids=()
	for h in "${hosts[@]}"; do
		if [ -f "$dir/$h/logs/.run.pid" ]; then
			"$bin/metaq-server" stop -f "$dir/$h/conf/server.ini" -logdir "$dir/$h/logs" >/dev/null &
			pids+=($!)
		fi
	done
	for p in "${pids[@]}"; do wait "$p" || true; done
	local left=()
	for s in "${sites[@]}"; do
		for f in "$dir/nats-$s/nats.pid" "$dir/zk-$s/zk.pid"; do
			if [ -f "$f" ]; then
				kill "$(cat "$f")" 2>/dev/null && left+=("$(cat "$f")")
				rm -f "$f"
			fi
		done
	done
	# Wait for them to exit, so their ports are free when down returns.
	for p in "${left[@]}"; do
		for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
	done
	rm -rf "$dir"
	log "stopped and removed $dir"
}

status() {
	dir=$(cd "$dir" && pwd)
	bin=${METAQ_BIN:-$dir/bin}
	for h in "${hosts[@]}"; do
		echo "== $h"
		"$bin/metaq-server" status -f "$dir/$h/conf/server.ini" -logdir "$dir/$h/logs" || true
	done
}

case "$cmd" in
up) up ;;
layout) layout ;;
down) down ;;
status) status ;;
-h | --help | help) usage ;;
*) usage >&2; exit 2 ;;
esac
