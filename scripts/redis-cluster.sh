#!/usr/bin/env bash
# redis-cluster.sh — a private Redis Cluster for the cluster tests (3 masters, 3 replicas, 127.0.0.1).
#
#   scripts/redis-cluster.sh up      start 6 `redis-server --cluster-enabled yes` on free ports, create the
#                                    cluster (redis-cli --cluster create ... --cluster-replicas 1), wait for
#                                    cluster_state:ok on every node and for every replica's link, and
#                                    write .local/redis-cluster.env:
#                                      export REDIS_CLUSTER_URL='redis+cluster://127.0.0.1:P1?addr=127.0.0.1:P2&...'
#   scripts/redis-cluster.sh down    stop the nodes `up` started (by their pid files) and delete their data
#   scripts/redis-cluster.sh env     print .local/redis-cluster.env
#
# Nodes live under .local/redis-cluster/<port>/ (git-ignored): no persistence, replicas synced at
# once (repl-diskless-sync-delay 0), node timeout 2 s; `up` takes about 3 s here. scripts/test.sh
# (`make test`) runs `up` after scripts/services.sh and `down` when it ends, also on failure; the
# tests reading REDIS_CLUSTER_URL (shared/redisstore, shared/expiry) skip without it, naming this
# command.
#
# Knobs (environment): FLAGDOWN_CLUSTER_PORT (first port tried, default 7100; each node also needs
# its port + 10000 for the cluster bus), FLAGDOWN_SERVICES_TIMEOUT (seconds to wait, default 60),
# FLAGDOWN_CLUSTER_NAME (default redis-cluster: the names of the folder and env file under .local/;
# make test uses its own, so it never restarts or stops a cluster started by hand).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${FLAGDOWN_CLUSTER_NAME:-redis-cluster}"
DIR="$ROOT/.local/$NAME"
ENV_FILE="$ROOT/.local/$NAME.env"
HOST=127.0.0.1
NODES=6
FIRST_PORT="${FLAGDOWN_CLUSTER_PORT:-7100}"
TIMEOUT="${FLAGDOWN_SERVICES_TIMEOUT:-60}"

log() { printf 'redis-cluster: %s\n' "$*" >&2; }
die() { printf 'redis-cluster: error: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
port_open() { timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" >/dev/null 2>&1; }
cli() { local port="$1"; shift; timeout 10 redis-cli -h "$HOST" -p "$port" "$@"; }

# alive DIR: true if the redis-server whose pid is in DIR/redis.pid runs.
alive() {
	local pid
	pid="$(cat "$1/redis.pid" 2>/dev/null)" || return 1
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q redis-server
}

down() {
	[ -d "$DIR" ] || { rm -f "$ENV_FILE"; return 0; }
	local d pid
	for d in "$DIR"/*/; do
		[ -d "$d" ] || continue
		d="${d%/}"
		if alive "$d"; then
			pid="$(cat "$d/redis.pid")"
			log "stopping node ${d##*/} (pid $pid)"
			kill "$pid" 2>/dev/null || true
			for _ in $(seq 50); do alive "$d" || break; sleep 0.1; done
			if alive "$d"; then kill -9 "$pid" 2>/dev/null || true; fi
		fi
	done
	rm -rf "$DIR" "$ENV_FILE"
}

# free_base: the first port P >= FIRST_PORT with P..P+5 and their bus ports P+10000.. all unused.
free_base() {
	local p i ok
	for ((p = FIRST_PORT; p < FIRST_PORT + 600; p += NODES)); do
		ok=1
		for ((i = 0; i < NODES; i++)); do
			if port_open "$HOST" $((p + i)) || port_open "$HOST" $((p + i + 10000)); then ok=0; break; fi
		done
		if [ "$ok" = 1 ]; then echo "$p"; return 0; fi
	done
	return 1
}

up() {
	have redis-server || die "redis-server is not installed (scripts/services.sh up --redis-server installs it)"
	have redis-cli || die "redis-cli is not installed (Debian package redis-tools)"
	down
	local base ports=() addrs=() i port d
	base="$(free_base)" || die "no 6 free ports (and bus ports +10000) from $FIRST_PORT"
	for ((i = 0; i < NODES; i++)); do
		port=$((base + i))
		ports+=("$port")
		addrs+=("$HOST:$port")
		d="$DIR/$port"
		mkdir -p "$d"
		redis-server --bind "$HOST" --port "$port" --cluster-enabled yes --cluster-config-file "$d/nodes.conf" \
			--cluster-node-timeout 2000 --repl-diskless-sync-delay 0 --save "" --appendonly no --daemonize yes \
			--dir "$d" --pidfile "$d/redis.pid" --logfile "$d/redis.log" </dev/null >&2
	done
	local deadline=$((SECONDS + TIMEOUT))
	for port in "${ports[@]}"; do
		until [[ "$(cli "$port" ping 2>/dev/null)" == PONG ]]; do
			((SECONDS < deadline)) || die "node $port did not answer within ${TIMEOUT}s (see $DIR/$port/redis.log)"
			sleep 0.1
		done
	done
	log "creating the cluster on ${addrs[*]} (3 masters, 1 replica each)"
	timeout "$TIMEOUT" redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 ||
		{ cat "$DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
	local pending
	while :; do
		pending=0
		for port in "${ports[@]}"; do
			info="$(cli "$port" cluster info 2>/dev/null | tr -d '\r')"
			[[ "$info" == *cluster_state:ok* && "$info" == *cluster_known_nodes:$NODES* ]] || pending=1
			role="$(cli "$port" role 2>/dev/null | head -1 | tr -d '\r')"
			if [ "$role" = slave ]; then
				[[ "$(cli "$port" info replication 2>/dev/null | tr -d '\r')" == *master_link_status:up* ]] || pending=1
			fi
		done
		[ "$pending" = 0 ] && break
		((SECONDS < deadline)) || die "cluster not ok within ${TIMEOUT}s (see $DIR/*/redis.log)"
		sleep 0.2
	done
	local url="redis+cluster://${addrs[0]}?addr=${addrs[1]}&addr=${addrs[2]}"
	printf "export REDIS_CLUSTER_URL='%s'\n" "$url" >"$ENV_FILE"
	log "ready: REDIS_CLUSTER_URL=$url"
}

case "${1:-}" in
up) up ;;
down) down ;;
env) cat "$ENV_FILE" ;;
*) die "usage: $0 up|down|env" ;;
esac
