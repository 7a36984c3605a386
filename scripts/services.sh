#!/usr/bin/env bash
# services.sh — make sure a Redis and a PostgreSQL are available for flagdown, and stop the ones it started.
#
#   scripts/services.sh up [--private] [--owner NAME] [--redis-server]
#                                                       find or start Redis + PostgreSQL, write .local/services.env
#   scripts/services.sh down [--owner NAME]             stop what `up` started (only NAME's, if given)
#   scripts/services.sh env                             print .local/services.env
#   scripts/services.sh status                          show what is recorded in .local/started
#   scripts/services.sh clean                           `down`, then delete the private data directories
#
# For each service `up` uses, in this order:
#   1. one found running: $DATABASE_URL / $REDIS_URL if set and reachable, else Redis on
#      127.0.0.1:$FLAGDOWN_REDIS_PORT (6379) and PostgreSQL on 127.0.0.1:$FLAGDOWN_PG_PORT (5432),
#      user postgres, no password (trust);
#   2. a private instance started from the installed binaries, data under .local/ (git-ignored), on
#      127.0.0.1:$FLAGDOWN_PRIVATE_REDIS_PORT (6390) / $FLAGDOWN_PRIVATE_PG_PORT (5439), or the next free
#      port; it is recorded in .local/started so that `down` stops exactly it and nothing found running;
#   3. if the binaries are missing, the Debian packages redis-server / postgresql are installed with
#      apt-get (not when FLAGDOWN_NO_INSTALL=1), then 1 is re-checked (a package may start its own
#      server) and otherwise 2 is done.
# The PostgreSQL database `flagdown` is created if missing. Then .local/services.env gets
#   export DATABASE_URL='postgres://postgres@HOST:PORT/flagdown?sslmode=disable'
#   export REDIS_URL='redis://HOST:PORT/0'
#
# Knobs (environment):
#   FLAGDOWN_REDIS_PORT, FLAGDOWN_PG_PORT   ports probed in step 1 (point them at unused ports, e.g.
#                                           6399 / 5499, to simulate a machine without services)
#   --private                               skip step 1 entirely (also ignores DATABASE_URL / REDIS_URL)
#   --redis-server                          also make sure the redis-server binary is installed (apt-get, as in
#                                           3), even when a running Redis is used: the chaos run (`make chaos`,
#                                           TestChaosShort in `make test`) starts and restarts a Redis of its own
#   FLAGDOWN_PRIVATE_REDIS_PORT, FLAGDOWN_PRIVATE_PG_PORT   first port tried for private instances
#   FLAGDOWN_SERVICES_TIMEOUT               seconds to wait for a started service (default 60)
#   FLAGDOWN_NO_INSTALL=1                   never run apt-get; fail instead
#   FLAGDOWN_PG_LIBDIR                      where PostgreSQL versions live (default /usr/lib/postgresql)
#   --owner NAME / FLAGDOWN_SERVICES_OWNER  tag for what `up` starts; `down --owner NAME` stops only those
#                                           (make test / make demo use their own tag, so they do not stop
#                                           instances you started yourself with `make services`)
# PostgreSQL refuses to run as root: as root the private cluster is run as the `postgres` system user;
# if that user cannot reach .local/, the cluster lives in /var/tmp/flagdown-pg-<hash of this checkout>.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="$ROOT/.local"
ENV_FILE="$LOCAL/services.env"
STARTED="$LOCAL/started"

HOST=127.0.0.1
REDIS_PROBE_PORT="${FLAGDOWN_REDIS_PORT:-6379}"
PG_PROBE_PORT="${FLAGDOWN_PG_PORT:-5432}"
REDIS_PRIVATE_PORT="${FLAGDOWN_PRIVATE_REDIS_PORT:-6390}"
PG_PRIVATE_PORT="${FLAGDOWN_PRIVATE_PG_PORT:-5439}"
TIMEOUT="${FLAGDOWN_SERVICES_TIMEOUT:-60}"
OWNER="${FLAGDOWN_SERVICES_OWNER:-manual}"
PRIVATE=0
NEED_REDIS_SERVER=0
DB_NAME=flagdown

log() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: error: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

# squote VALUE: VALUE as a single-quoted shell word.
squote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

# port_open HOST PORT: true if something accepts TCP connections there.
port_open() { timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" >/dev/null 2>&1; }

# detached CMD...: run CMD with no file descriptors but 0-2 inherited, so a daemon it starts holds
# neither our lock nor a pipe of whoever runs us (a CI log reader would wait for it forever).
detached() {
	(
		for fd in /proc/self/fd/*; do
			fd="${fd##*/}"
			if [ "$fd" -gt 2 ]; then eval "exec $fd>&-" 2>/dev/null || true; fi
		done
		"$@" </dev/null
	)
}

# ---------------------------------------------------------------- Redis probes

# redis_ping HOST PORT: true if a Redis there answers PING without needing a password.
redis_ping() {
	local host=$1 port=$2 out
	if have redis-cli; then
		out="$(timeout 5 redis-cli -h "$host" -p "$port" ping 2>/dev/null || true)"
	else
		out="$(timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2" || exit 1; printf "PING\r\n" >&3; IFS= read -r l <&3; printf "%s" "$l"' _ "$host" "$port" 2>/dev/null || true)"
	fi
	[[ "$out" == *PONG* ]]
}

# redis_url_ok URL
redis_url_ok() {
	local url=$1 hostport host port
	if have redis-cli; then
		[[ "$(timeout 5 redis-cli --no-auth-warning -u "$url" ping 2>/dev/null || true)" == *PONG* ]]
		return
	fi
	# No redis-cli: only plain redis://host:port URLs can be checked.
	hostport="${url#*://}"; hostport="${hostport##*@}"; hostport="${hostport%%/*}"
	host="${hostport%:*}"; port="${hostport##*:}"
	[ "$host" != "$hostport" ] || port=6379
	redis_ping "${host:-127.0.0.1}" "$port"
}

# ---------------------------------------------------------------- PostgreSQL probes

# pg_ok HOST PORT [DB]: true if user postgres can connect without a password.
pg_ok() {
	local host=$1 port=$2 db=${3:-postgres}
	if have psql; then
		PGCONNECT_TIMEOUT=3 timeout 10 psql -w -X -q -h "$host" -p "$port" -U postgres -d "$db" -Atc 'select 1' >/dev/null 2>&1
	elif have pg_isready; then
		timeout 10 pg_isready -q -h "$host" -p "$port" -U postgres -d "$db" -t 3
	else
		return 1
	fi
}

pg_url_ok() {
	if have psql; then
		PGCONNECT_TIMEOUT=3 timeout 10 psql -w -X -q "$1" -Atc 'select 1' >/dev/null 2>&1
	elif have pg_isready; then
		timeout 10 pg_isready -q -d "$1" -t 3
	else
		return 1
	fi
}

# pg_ensure_db HOST PORT: create database flagdown if it does not exist.
pg_ensure_db() {
	local host=$1 port=$2 exists
	have psql || install_pkgs postgresql-client
	exists="$(PGCONNECT_TIMEOUT=3 psql -w -X -q -h "$host" -p "$port" -U postgres -d postgres -Atc \
		"select 1 from pg_database where datname = '$DB_NAME'")" || die "cannot query databases on $host:$port"
	if [ "$exists" != 1 ]; then
		log "creating database $DB_NAME on $host:$port"
		if ! createdb -w -h "$host" -p "$port" -U postgres "$DB_NAME" 2>"$LOCAL/createdb.err"; then
			# Somebody else may have created it in the meantime.
			grep -q 'already exists' "$LOCAL/createdb.err" || { cat "$LOCAL/createdb.err" >&2; die "createdb failed"; }
		fi
		rm -f "$LOCAL/createdb.err"
	fi
}

# ---------------------------------------------------------------- installing

APT_UPDATED=0
install_pkgs() {
	local sudo=()
	[ "${FLAGDOWN_NO_INSTALL:-0}" != 1 ] || die "$* needed but FLAGDOWN_NO_INSTALL=1; install it yourself"
	have apt-get || die "$* needed and apt-get is not available; install it yourself"
	if ! is_root; then
		have sudo || die "$* needed; run as root or install it yourself"
		sudo=(sudo)
	fi
	log "installing $* with apt-get"
	if [ "$APT_UPDATED" = 0 ]; then
		"${sudo[@]}" apt-get update -q >&2
		APT_UPDATED=1
	fi
	# No systemd here: a package's attempt to start its service may fail; that is fine.
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
	hash -r
}

# ---------------------------------------------------------------- state (.local/started)
# One line per instance started by this script: `KIND OWNER PORT DIR USER`
#   redis    OWNER PORT REDIS_DIR -
#   postgres OWNER PORT PG_BASE   RUN_AS_USER

record() {
	local kind=$1
	[ -f "$STARTED" ] && awk -v k="$kind" '$1 == k { f = 1 } END { exit !f }' "$STARTED" && return 0
	printf '%s\n' "$*" >>"$STARTED"
}
unrecord() {
	local kind=$1 tmp
	[ -f "$STARTED" ] || return 0
	tmp="$(mktemp "$LOCAL/started.XXXXXX")"
	awk -v k="$kind" '$1 != k' "$STARTED" >"$tmp" || true
	if [ -s "$tmp" ]; then mv "$tmp" "$STARTED"; else rm -f "$tmp" "$STARTED"; fi
}
recorded() { # recorded KIND -> prints the line
	[ -f "$STARTED" ] || return 1
	awk -v k="$1" '$1 == k { print; f = 1; exit } END { exit !f }' "$STARTED"
}

# ---------------------------------------------------------------- private Redis

REDIS_DIR="$LOCAL/redis"

redis_pid_of_dir() { # prints the pid of our private redis if it is alive
	local pid
	[ -f "$REDIS_DIR/redis.pid" ] || return 1
	pid="$(cat "$REDIS_DIR/redis.pid" 2>/dev/null)" || return 1
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'redis-server' || return 1
	printf '%s\n' "$pid"
}

# redis_is_ours PORT: the Redis answering on PORT is the one whose pid is in our pidfile.
redis_is_ours() {
	local pid served
	pid="$(redis_pid_of_dir)" || return 1
	served="$(timeout 5 redis-cli -h "$HOST" -p "$1" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')"
	[ "$served" = "$pid" ]
}

start_private_redis() {
	local port line _k _o pid
	if ! have redis-server; then
		install_pkgs redis-server
		if [ "$PRIVATE" = 0 ] && redis_ping "$HOST" "$REDIS_PROBE_PORT"; then
			log "redis: the packaged server is running on $HOST:$REDIS_PROBE_PORT; using it"
			REDIS_URL_OUT="redis://$HOST:$REDIS_PROBE_PORT/0"
			return
		fi
	fi
	have redis-cli || install_pkgs redis-tools
	mkdir -p "$REDIS_DIR"
	# Already running from an earlier `up`?
	if line="$(recorded redis)"; then
		read -r _k _o port _ <<<"$line"
		if redis_is_ours "$port"; then
			log "redis: private instance already running on $HOST:$port (pid $(redis_pid_of_dir))"
			REDIS_URL_OUT="redis://$HOST:$port/0"
			return
		fi
		unrecord redis
	fi
	for ((port = REDIS_PRIVATE_PORT; port < REDIS_PRIVATE_PORT + 20; port++)); do
		if port_open "$HOST" "$port"; then
			log "redis: port $port is taken, trying the next one"
			continue
		fi
		log "redis: starting a private redis-server on $HOST:$port (data in .local/redis, no persistence)"
		rm -f "$REDIS_DIR/redis.pid"
		detached redis-server --bind "$HOST" --port "$port" --save "" --appendonly no --daemonize yes \
			--dir "$REDIS_DIR" --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" >&2
		local deadline=$((SECONDS + TIMEOUT))
		while ((SECONDS < deadline)); do
			if redis_is_ours "$port"; then
				record redis "$OWNER" "$port" "$REDIS_DIR" -
				log "redis: ready on $HOST:$port (pid $(redis_pid_of_dir))"
				REDIS_URL_OUT="redis://$HOST:$port/0"
				return
			fi
			# Gave up (e.g. the port was grabbed in the meantime)?
			if ! redis_pid_of_dir >/dev/null && ((SECONDS > deadline - TIMEOUT + 2)); then break; fi
			sleep 0.2
		done
		if pid="$(redis_pid_of_dir)"; then kill "$pid" 2>/dev/null || true; fi
		if port_open "$HOST" "$port"; then
			log "redis: port $port was taken meanwhile, trying the next one"
			continue
		fi
		tail -n 20 "$REDIS_DIR/redis.log" >&2 2>/dev/null || true
		die "redis: private instance did not become ready within ${TIMEOUT}s (log: .local/redis/redis.log)"
	done
	die "redis: no free port in $REDIS_PRIVATE_PORT..$((REDIS_PRIVATE_PORT + 19))"
}

stop_redis() { # stop_redis DIR
	local dir=$1 pid i
	pid="$(REDIS_DIR="$dir" redis_pid_of_dir)" || { log "redis: private instance is not running"; return 0; }
	log "redis: stopping private instance (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	log "redis: pid $pid did not stop; killing it"
	kill -KILL "$pid" 2>/dev/null || true
}

# ---------------------------------------------------------------- private PostgreSQL

pg_bindir() {
	local d
	for d in $(ls -d "${FLAGDOWN_PG_LIBDIR:-/usr/lib/postgresql}"/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then printf '%s\n' "$d"; return 0; fi
	done
	[ -z "${FLAGDOWN_PG_LIBDIR:-}" ] || return 1
	for d in initdb pg_ctl; do have "$d" || return 1; done
	dirname "$(readlink -f "$(command -v pg_ctl)")"
}

# as_pg CMD...: run as the cluster owner (postgres when we are root, else ourselves).
as_pg() {
	if is_root; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# pg_base: where the private cluster lives (prints it); creates it owned by the cluster owner.
pg_base() {
	local base="$LOCAL/pg" alt owner
	alt="/var/tmp/flagdown-pg-$(printf '%s' "$ROOT" | sha1sum | cut -c1-12)"
	if is_root; then
		getent passwd postgres >/dev/null || die "postgres: no 'postgres' system user to run the cluster as"
		# The postgres user must be able to reach .local/, and the socket path must stay short.
		if ! runuser -u postgres -- test -x "$LOCAL" || [ ${#base} -gt 80 ]; then
			base="$alt"
		fi
		mkdir -p "$base"
		owner="$(stat -c %U "$base")"
		if [ "$owner" != postgres ]; then
			[ "$base" = "$LOCAL/pg" ] || [ "$owner" = root ] || die "postgres: $base is owned by $owner; remove it"
			chown -R postgres: "$base"
		fi
		chmod 700 "$base"
	else
		[ ${#base} -le 80 ] || base="$alt"
		mkdir -p "$base"
		[ -O "$base" ] || die "postgres: $base is not owned by you; remove it"
		chmod 700 "$base"
	fi
	[ "$base" = "$LOCAL/pg" ] || printf '%s\n' "$base" >"$LOCAL/pg.base"
	printf '%s\n' "$base"
}

start_private_pg() {
	local bindir base data port line _k _o _d runas
	if ! bindir="$(pg_bindir)"; then
		install_pkgs postgresql
		if [ "$PRIVATE" = 0 ] && pg_ok "$HOST" "$PG_PROBE_PORT"; then
			log "postgres: the packaged cluster is running on $HOST:$PG_PROBE_PORT and accepts user postgres; using it"
			PG_HOSTPORT="$HOST:$PG_PROBE_PORT"
			return
		fi
		bindir="$(pg_bindir)" || die "postgres: initdb/pg_ctl still not found after installing postgresql"
	fi
	have psql || install_pkgs postgresql-client
	runas="$(is_root && echo postgres || id -un)"
	base="$(pg_base)"
	data="$base/data"
	# Already running from an earlier `up`?
	if line="$(recorded postgres)"; then
		read -r _k _o port _d _ <<<"$line"
		if [ "$_d" = "$base" ] && as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1 && pg_ok "$HOST" "$port"; then
			log "postgres: private cluster already running on $HOST:$port ($data)"
			PG_HOSTPORT="$HOST:$port"
			return
		fi
		unrecord postgres
	fi
	if as_pg "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; then
		# Ours (same data dir) but not recorded, e.g. .local/started was deleted: stop it and start afresh.
		log "postgres: stopping an unrecorded private cluster in $data"
		as_pg "$bindir/pg_ctl" -D "$data" -m fast -w stop >&2 || true
	fi
	if [ ! -f "$data/PG_VERSION" ]; then
		log "postgres: initdb $data (as $runas, trust auth, superuser postgres)"
		rm -rf "$data"
		as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C >"$base/initdb.log" 2>&1 ||
			{ cat "$base/initdb.log" >&2; die "postgres: initdb failed"; }
		# Throw-away dev/test cluster: durability off, enough connections for parallel tests.
		as_pg tee -a "$data/postgresql.conf" >/dev/null <<EOF

# added by scripts/services.sh (private dev/test cluster)
listen_addresses = '$HOST'
unix_socket_directories = '$base/run'
max_connections = 300
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
	fi
	as_pg mkdir -p "$base/run"
	for ((port = PG_PRIVATE_PORT; port < PG_PRIVATE_PORT + 20; port++)); do
		if port_open "$HOST" "$port"; then
			log "postgres: port $port is taken, trying the next one"
			continue
		fi
		log "postgres: starting a private cluster on $HOST:$port (data in $data, socket in $base/run)"
		if detached as_pg "$bindir/pg_ctl" -D "$data" -l "$base/postgres.log" -o "-p $port" -w -t "$TIMEOUT" start >&2; then
			record postgres "$OWNER" "$port" "$base" "$runas"
			local deadline=$((SECONDS + TIMEOUT))
			until pg_ok "$HOST" "$port"; do
				((SECONDS < deadline)) || die "postgres: cluster started but does not accept connections on $HOST:$port"
				sleep 0.2
			done
			log "postgres: ready on $HOST:$port"
			PG_HOSTPORT="$HOST:$port"
			return
		fi
		as_pg "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
		if port_open "$HOST" "$port"; then
			log "postgres: port $port was taken meanwhile, trying the next one"
			continue
		fi
		tail -n 20 "$base/postgres.log" >&2 2>/dev/null || true
		die "postgres: private cluster did not start within ${TIMEOUT}s (log: $base/postgres.log)"
	done
	die "postgres: no free port in $PG_PRIVATE_PORT..$((PG_PRIVATE_PORT + 19))"
}

stop_pg() { # stop_pg BASE USER
	local base=$1 user=$2 bindir
	bindir="$(pg_bindir)" || { log "postgres: pg_ctl not found; cannot stop cluster in $base"; return 1; }
	if [ "$user" != "$(id -un)" ] && is_root; then
		(cd / && runuser -u "$user" -- "$bindir/pg_ctl" -D "$base/data" status >/dev/null 2>&1) || { log "postgres: private cluster is not running"; return 0; }
		log "postgres: stopping private cluster ($base/data)"
		(cd / && runuser -u "$user" -- "$bindir/pg_ctl" -D "$base/data" -m fast -w -t 60 stop >&2)
	else
		"$bindir/pg_ctl" -D "$base/data" status >/dev/null 2>&1 || { log "postgres: private cluster is not running"; return 0; }
		log "postgres: stopping private cluster ($base/data)"
		"$bindir/pg_ctl" -D "$base/data" -m fast -w -t 60 stop >&2
	fi
}

# ---------------------------------------------------------------- commands

lock() {
	mkdir -p "$LOCAL"
	if have flock; then
		exec 9>"$LOCAL/services.lock"
		flock -w 300 9 || die "another scripts/services.sh is running (lock .local/services.lock)"
	fi
}

cmd_up() {
	lock
	local db_url
	REDIS_URL_OUT=""
	PG_HOSTPORT=""
	# ---- Redis
	if [ "$PRIVATE" = 0 ] && [ -n "${REDIS_URL:-}" ]; then
		if redis_url_ok "$REDIS_URL"; then
			log "redis: using REDIS_URL from the environment (reachable)"
			REDIS_URL_OUT="$REDIS_URL"
		else
			log "redis: REDIS_URL is set but not reachable; ignoring it"
		fi
	fi
	if [ -z "$REDIS_URL_OUT" ] && [ "$PRIVATE" = 0 ]; then
		if redis_ping "$HOST" "$REDIS_PROBE_PORT"; then
			log "redis: found a running server on $HOST:$REDIS_PROBE_PORT; using it"
			REDIS_URL_OUT="redis://$HOST:$REDIS_PROBE_PORT/0"
		else
			log "redis: nothing usable on $HOST:$REDIS_PROBE_PORT"
		fi
	fi
	[ -n "$REDIS_URL_OUT" ] || start_private_redis
	if [ "$NEED_REDIS_SERVER" = 1 ] && ! have redis-server; then
		log "redis: the chaos run needs the redis-server binary (it starts a Redis of its own)"
		install_pkgs redis-server
	fi

	# ---- PostgreSQL
	db_url=""
	if [ "$PRIVATE" = 0 ] && [ -n "${DATABASE_URL:-}" ]; then
		if pg_url_ok "$DATABASE_URL"; then
			log "postgres: using DATABASE_URL from the environment (reachable)"
			db_url="$DATABASE_URL"
		else
			log "postgres: DATABASE_URL is set but not reachable; ignoring it"
		fi
	fi
	if [ -z "$db_url" ] && [ "$PRIVATE" = 0 ]; then
		if ! have psql && port_open "$HOST" "$PG_PROBE_PORT"; then
			log "postgres: something listens on $HOST:$PG_PROBE_PORT but psql is missing"
			install_pkgs postgresql-client
		fi
		if pg_ok "$HOST" "$PG_PROBE_PORT"; then
			log "postgres: found a running server on $HOST:$PG_PROBE_PORT (user postgres, no password); using it"
			PG_HOSTPORT="$HOST:$PG_PROBE_PORT"
		else
			log "postgres: nothing usable on $HOST:$PG_PROBE_PORT (not running, or user postgres needs a password)"
		fi
	fi
	if [ -z "$db_url" ]; then
		[ -n "$PG_HOSTPORT" ] || start_private_pg
		pg_ensure_db "${PG_HOSTPORT%:*}" "${PG_HOSTPORT##*:}"
		db_url="postgres://postgres@$PG_HOSTPORT/$DB_NAME?sslmode=disable"
	fi

	{
		echo "# written by scripts/services.sh up; source it: . .local/services.env"
		echo "export DATABASE_URL=$(squote "$db_url")"
		echo "export REDIS_URL=$(squote "$REDIS_URL_OUT")"
	} >"$ENV_FILE.tmp"
	mv "$ENV_FILE.tmp" "$ENV_FILE"
	log "wrote .local/services.env:"
	sed -n 's/^export /  /p' "$ENV_FILE" >&2
}

# With --owner only that owner's instances are stopped, else all recorded ones.
cmd_down() {
	lock
	local kind owner port dir user rc=0
	if [ ! -s "$STARTED" ]; then
		log "nothing recorded in .local/started; nothing to stop"
		return 0
	fi
	while read -r kind owner port dir user; do
		[ -n "$kind" ] || continue
		if [ -n "$DOWN_OWNER" ] && [ "$owner" != "$DOWN_OWNER" ]; then
			log "$kind: on port $port belongs to '$owner', not '$DOWN_OWNER'; leaving it running"
			continue
		fi
		case "$kind" in
		redis) stop_redis "$dir" && unrecord redis || rc=1 ;;
		postgres) stop_pg "$dir" "$user" && unrecord postgres || rc=1 ;;
		*) log "unknown entry '$kind' in .local/started; ignoring" ;;
		esac
	done < <(cat "$STARTED")
	return "$rc"
}

cmd_env() {
	[ -f "$ENV_FILE" ] || die "no .local/services.env; run scripts/services.sh up"
	cat "$ENV_FILE"
}

cmd_status() {
	if [ -s "$STARTED" ]; then
		log "started by this script (kind owner port dir user):"
		cat "$STARTED"
	else
		log "nothing started by this script is recorded"
	fi
}

cmd_clean() {
	cmd_down
	local base
	rm -rf "$LOCAL/redis" "$LOCAL/pg"
	if [ -f "$LOCAL/pg.base" ]; then
		base="$(cat "$LOCAL/pg.base")"
		case "$base" in /var/tmp/flagdown-pg-*) rm -rf "$base" ;; esac
		rm -f "$LOCAL/pg.base"
	fi
	rm -f "$ENV_FILE"
	log "removed private data directories and .local/services.env"
}

usage() { sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 1 ] || usage
CMD=$1
shift
DOWN_OWNER=""
while [ $# -gt 0 ]; do
	case "$1" in
	--private) PRIVATE=1 ;;
	--redis-server) NEED_REDIS_SERVER=1 ;;
	--owner) [ $# -ge 2 ] || usage; OWNER=$2; DOWN_OWNER=$2; shift ;;
	--owner=*) OWNER=${1#--owner=}; DOWN_OWNER=$OWNER ;;
	-h | --help) usage ;;
	*) die "unknown argument: $1" ;;
	esac
	shift
done
[[ "$OWNER" =~ ^[A-Za-z0-9._-]+$ ]] || die "owner must be a plain word: $OWNER"

case "$CMD" in
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
status) cmd_status ;;
clean) cmd_clean ;;
-h | --help | help) usage ;;
*) usage ;;
esac
