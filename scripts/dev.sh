#!/usr/bin/env bash
# dev.sh — what `make dev` runs: build bin/flagdown, bring up Redis + PostgreSQL (scripts/services.sh up,
# which also creates the `flagdown` database; `flagdown dev` creates it too when missing), then run
# `flagdown dev` in the foreground, its log on this terminal, with a token secret generated for the run;
# once GET /readyz answers 200 print the gateway URL and a curl walkthrough (mint tokens with
# `flagdown token`, a driver's ping, a ride request, the offer in the next ping, accept, the ride), also
# written to .local/dev.env for a second shell. Ctrl-C (or SIGTERM) stops the platform and then the
# services this run started, never ones it found running.
#
# Environment: GO (default go), FLAGDOWN_ADDR (listen address; default 127.0.0.1:8080, or the next free
# port if 8080 is taken), FLAGDOWN_READY_TIMEOUT (seconds, default 90), SERVICES_ARGS (extra arguments
# for services.sh up, e.g. --private), FLAGDOWN_BIN (skip the build and use this binary),
# FLAGDOWN_JWT_SECRET (the token secret; default: random per run).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
READY_TIMEOUT="${FLAGDOWN_READY_TIMEOUT:-90}"
OWNER="make-dev-$$"
BIN="${FLAGDOWN_BIN:-bin/flagdown}"
DEV_ENV=.local/dev.env
DEV_PID=""
SERVICES_UP=0

log() { printf 'dev: %s\n' "$*" >&2; }
step() { printf '\ndev: ==> %s\n' "$*" >&2; }
# shellcheck source=scripts/platform.sh
. scripts/platform.sh

# squote VALUE: VALUE as a single-quoted shell word.
squote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }


cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_dev
	if [ "$SERVICES_UP" = 1 ]; then
		scripts/services.sh down --owner "$OWNER" || log "warning: stopping services failed"
	fi
	rm -f "$DEV_ENV"
	# Ctrl-C and SIGTERM are how a dev session ends: not a failure.
	# Ctrl-C or SIGTERM is how a dev run ends: a normal end (exit 0), so make reports no error.
	if [ "$rc" -eq 0 ] || [ "$rc" -eq 130 ] || [ "$rc" -eq 143 ]; then log "stopped"; rc=0; else log "FAILED (exit $rc)"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


command -v curl >/dev/null 2>&1 || { log "curl is needed for the walkthrough (apt-get install curl)"; exit 1; }

if [ -z "${FLAGDOWN_BIN:-}" ]; then
	step "$GO build -o bin/flagdown ./cmd/flagdown"
	"$GO" build -o bin/flagdown ./cmd/flagdown
fi

step "scripts/services.sh up ${SERVICES_ARGS:-}"
SERVICES_UP=1
# shellcheck disable=SC2086
scripts/services.sh up --owner "$OWNER" ${SERVICES_ARGS:-}
# shellcheck disable=SC1091
. .local/services.env

pick_addr
GW="http://$URL_HOST"

if [ -z "${FLAGDOWN_JWT_SECRET:-}" ] && [ -z "${FLAGDOWN_JWKS_URL:-}" ]; then
	FLAGDOWN_JWT_SECRET="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
	export FLAGDOWN_JWT_SECRET
	log "generated FLAGDOWN_JWT_SECRET for this run"
fi

step "$BIN dev --addr $ADDR  (Ctrl-C stops it and the services this run started)"
# In the background of this non-interactive shell, so Ctrl-C reaches only this script, whose trap stops
# the platform gracefully (SIGTERM) before the services; its log still goes to this terminal.
"$BIN" dev --addr "$ADDR" </dev/null &
DEV_PID=$!

deadline=$((SECONDS + READY_TIMEOUT))
while :; do
	code="$(http_status "$GW/readyz")"
	[ "$code" != 200 ] || break
	if ! kill -0 "$DEV_PID" 2>/dev/null; then
		wait "$DEV_PID" && st=0 || st=$?
		DEV_PID=""
		log "flagdown dev exited (status $st) before it was ready; see its log above"
		exit 1
	fi
	if ((SECONDS >= deadline)); then
		log "not ready after ${READY_TIMEOUT}s (last /readyz status: $code)"
		exit 1
	fi
	sleep 0.3
done

mkdir -p .local && chmod 700 .local
# It holds the token secret: readable by its owner only (0600, in a 0700 folder), from its creation on.
rm -f "$DEV_ENV"
(umask 077 && {
	echo "# written by make dev (scripts/dev.sh) for this run; removed when it stops"
	echo "export GW=$(squote "$GW")"
	[ -z "${FLAGDOWN_JWT_SECRET:-}" ] || echo "export FLAGDOWN_JWT_SECRET=$(squote "$FLAGDOWN_JWT_SECRET")"
	echo "export DATABASE_URL=$(squote "$DATABASE_URL")"
	echo "export REDIS_URL=$(squote "$REDIS_URL")"
} >"$DEV_ENV")

cat >&2 <<EOF

dev: flagdown is ready: gateway $GW (health: $GW/readyz), live operations map $GW/map
dev: try it from another shell in this folder:

. $DEV_ENV    # GW, FLAGDOWN_JWT_SECRET, DATABASE_URL, REDIS_URL of this run
ID=\$RANDOM   # fresh ids: a rider has one open ride at a time, a driver one active ride
DRIVER=\$($BIN token --role driver --sub "d-\$ID")
RIDER=\$($BIN token --role rider --sub "r-\$ID")
# the driver goes online at Times Square
curl -s -X POST "\$GW/function/location-update" -H 'Content-Type: application/json' -H "Authorization: Bearer \$DRIVER" \\
  -d '{"lat": 40.7580, "lng": -73.9855, "status": "available"}'
# the rider asks for a ride nearby
RIDE=\$(curl -s -X POST "\$GW/function/order-create" -H 'Content-Type: application/json' -H "Authorization: Bearer \$RIDER" \\
  -d '{"pickup": {"lat": 40.7549, "lng": -73.9840}, "dropoff": {"lat": 40.7306, "lng": -73.9866}}' | sed -E 's/.*"ride_id": ?"([^"]+)".*/\1/'); echo "\$RIDE"
# the driver's next ping carries the offer; he accepts it
sleep 1; curl -s -X POST "\$GW/function/location-update" -H 'Content-Type: application/json' -H "Authorization: Bearer \$DRIVER" \\
  -d '{"lat": 40.7581, "lng": -73.9854}'
curl -s -X POST "\$GW/function/accept" -H 'Content-Type: application/json' -H "Authorization: Bearer \$DRIVER" -d "{\"ride_id\": \"\$RIDE\"}"
curl -s "\$GW/function/ride/\$RIDE" -H "Authorization: Bearer \$RIDER"
# the live operations map, for the ops role: open the printed address in a browser (the token
# travels in the fragment, which no server sees; the page keeps it in the tab and drops it from the URL)
echo "\$GW/map#token=\$($BIN token --role ops --sub "ops-\$ID" --ttl 8h)"

dev: Ctrl-C here stops flagdown dev and the services this run started.

EOF

# Foreground: wait for the platform; Ctrl-C / SIGTERM run the trap.
wait "$DEV_PID" && st=0 || st=$?
DEV_PID=""
log "flagdown dev exited (status $st)"
exit "$st"
