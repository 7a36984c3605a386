# platform.sh — shell helpers that scripts/demo.sh and scripts/dev.sh share: stop the flagdown dev
# they started, probe a port, pick the listen address, read an HTTP status. Sourced, never run; the caller defines log().

# stop_dev: stop the flagdown dev whose pid is DEV_PID (SIGTERM, then SIGKILL after 30 s); clears DEV_PID.
stop_dev() {
	[ -n "$DEV_PID" ] || return 0
	if kill -0 "$DEV_PID" 2>/dev/null; then
		log "stopping flagdown dev (pid $DEV_PID, SIGTERM)"
		kill -TERM "$DEV_PID" 2>/dev/null || true
		local i
		for ((i = 0; i < 300; i++)); do
			kill -0 "$DEV_PID" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$DEV_PID" 2>/dev/null; then
			log "flagdown dev did not stop within 30s; SIGKILL"
			kill -KILL "$DEV_PID" 2>/dev/null || true
		fi
	fi
	wait "$DEV_PID" 2>/dev/null || true
	DEV_PID=""
}

# port_busy PORT: something accepts connections on 127.0.0.1:PORT.
port_busy() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" >/dev/null 2>&1; }

# pick_nats_port: unless NATS_URL names a broker, set NATS_PORT to the first free port of 4300..4400
# for flagdown dev's embedded broker, and DEV_NATS_ARGS to the flag giving it; the broker's URL is
# then nats://127.0.0.1:NATS_PORT (the replay's invariant check reads its streams there).
pick_nats_port() {
	NATS_PORT="" DEV_NATS_ARGS=""
	[ -z "${NATS_URL:-}" ] || return 0
	local port=4300
	while port_busy "$port"; do
		((port < 4400)) || { log "no free port in 4300..4400 for the embedded broker; set NATS_URL"; exit 1; }
		port=$((port + 1))
	done
	NATS_PORT=$port DEV_NATS_ARGS="--nats-port $port"
}

# http_status URL: the HTTP status code (000 if no answer).
http_status() {
	local url=$1
	if command -v curl >/dev/null 2>&1; then
		curl -s -o /dev/null -m 3 -w '%{http_code}' "$url" || true
		return
	fi
	local hostport="${url#http://}" path
	path="/${hostport#*/}"
	hostport="${hostport%%/*}"
	timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$3" "$1" >&3
		IFS=" " read -r _ code _ <&3; printf "%s" "$code"' _ "${hostport%:*}" "${hostport##*:}" "$path" 2>/dev/null || printf '000'
}

# pick_addr: set ADDR to FLAGDOWN_ADDR, or to 127.0.0.1 and the first free port of 8080..8180 (saying
# so when it is not 8080), and URL_HOST to the host:port clients reach it at.
pick_addr() {
	if [ -n "${FLAGDOWN_ADDR:-}" ]; then
		ADDR="$FLAGDOWN_ADDR"
	else
		local port=8080
		while port_busy "$port"; do
			((port < 8180)) || { log "no free port in 8080..8180; set FLAGDOWN_ADDR"; exit 1; }
			port=$((port + 1))
		done
		[ "$port" = 8080 ] || log "port 8080 is taken; using $port"
		ADDR="127.0.0.1:$port"
	fi
	case "$ADDR" in :*) URL_HOST="127.0.0.1$ADDR" ;; 0.0.0.0:*) URL_HOST="127.0.0.1:${ADDR##*:}" ;; *) URL_HOST="$ADDR" ;; esac
}
