#!/usr/bin/env bash
# demo.sh — what `make demo` runs: build bin/flagdown, bring up Redis + PostgreSQL (scripts/services.sh up),
# apply the migrations, start `flagdown dev` in the background (log: .local/dev.log), wait for
# GET /readyz = 200, replay NYC taxi trips against it with `flagdown replay --url http://ADDR $REPLAY_ARGS`,
# then stop the platform (SIGTERM) and the services this run started — also on failure or Ctrl-C.
#
# Environment: GO (default go), FLAGDOWN_ADDR (listen address; default 127.0.0.1:8080, or the next free
# port if 8080 is taken), REPLAY_ARGS (default: --minutes 20 --skip-minutes 0), FLAGDOWN_READY_TIMEOUT (seconds, default 90),
# SERVICES_ARGS (extra arguments for services.sh up, e.g. --private), FLAGDOWN_BIN (skip the build and
# use this binary), FLAGDOWN_JWT_SECRET (the token secret dev and the replay share; default: random per run),
# FLAGDOWN_SIM_SPEEDUP (default 8: the replay's --speedup, and the platform's riders' seconds per second),
# FLAGDOWN_OFFER_WINDOW (default 15 s of the riders' time: 1875ms at 8x),
# FLAGDOWN_MATCH_MODE (greedy or batch: flagdown dev matches with it, and the replay, which reads the same
# environment, names it in its summary as match_mode).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
REPLAY_ARGS="${REPLAY_ARGS---minutes 20 --skip-minutes 0}"
READY_TIMEOUT="${FLAGDOWN_READY_TIMEOUT:-90}"
OWNER="make-demo-$$"
BIN="${FLAGDOWN_BIN:-bin/flagdown}"
DEV_LOG=.local/dev.log
DEV_PID=""
SERVICES_UP=0

log() { printf 'demo: %s\n' "$*" >&2; }
step() { printf '\ndemo: ==> %s\n' "$*" >&2; }
# shellcheck source=scripts/platform.sh
. scripts/platform.sh


cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_dev
	if [ "$SERVICES_UP" = 1 ]; then
		scripts/services.sh down --owner "$OWNER" || log "warning: stopping services failed"
	fi
	if [ "$rc" -eq 0 ]; then log "done"; else log "FAILED (exit $rc); platform log: $DEV_LOG"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


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
# The demo's rides and drivers live apart from `make dev`'s (schema public, prefix flagdown:), so a
# dev session never inherits a demo's thousands of rides, nor a demo a dev session's.
export FLAGDOWN_DB_SCHEMA="${FLAGDOWN_DB_SCHEMA:-demo}" FLAGDOWN_REDIS_PREFIX="${FLAGDOWN_REDIS_PREFIX:-flagdown-demo:}"
# The replay runs in simulated time (--speedup, default 8): the platform's wait estimate is in the
# riders' seconds only when FLAGDOWN_SIM_SPEEDUP says the same (the replay warns when they differ).
export FLAGDOWN_SIM_SPEEDUP="${FLAGDOWN_SIM_SPEEDUP:-8}"
# The offer window in the riders' seconds too: a driver has 15 simulated seconds to answer, as a real
# one has 15 s (15 s of wall time would cost a rider whose offer is ignored 2 simulated minutes at
# 8x); at least 1 s. FLAGDOWN_OFFER_WINDOW overrides it.
if [ -z "${FLAGDOWN_OFFER_WINDOW:-}" ]; then
	FLAGDOWN_OFFER_WINDOW="$(awk -v s="$FLAGDOWN_SIM_SPEEDUP" 'BEGIN { ms = int(15000 / s + 0.5); if (ms < 1000) ms = 1000; print ms "ms" }')"
	export FLAGDOWN_OFFER_WINDOW
fi
log "demo data: PostgreSQL schema $FLAGDOWN_DB_SCHEMA, Redis prefix $FLAGDOWN_REDIS_PREFIX (make dev uses public and flagdown:)"
log "offer window $FLAGDOWN_OFFER_WINDOW (15 s of the riders' time at ${FLAGDOWN_SIM_SPEEDUP}x unless FLAGDOWN_OFFER_WINDOW was set)"

pick_addr
BASE_URL="http://$URL_HOST"

# Each demo starts from a clean slate: a run left behind (its rides still REQUESTED, their retry
# timers armed) would otherwise take this run's drivers and skew its figures.
step "$BIN migrate --fresh  (schema $FLAGDOWN_DB_SCHEMA, prefix $FLAGDOWN_REDIS_PREFIX)"
"$BIN" migrate --fresh

# Client tokens: flagdown dev and the replay share one HS256 secret; a random one for this run unless
# FLAGDOWN_JWT_SECRET (or FLAGDOWN_JWKS_URL, which the replay cannot mint for) is set.
if [ -z "${FLAGDOWN_JWT_SECRET:-}" ] && [ -z "${FLAGDOWN_JWKS_URL:-}" ]; then
	FLAGDOWN_JWT_SECRET="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
	export FLAGDOWN_JWT_SECRET
	# Never printed: the demo's log may be shared; the secret lives in this script's environment only.
	log "random FLAGDOWN_JWT_SECRET for this run (not printed; set your own to mint tokens by hand)"
fi
pick_nats_port
step "$BIN dev --addr $ADDR $DEV_NATS_ARGS  (log: $DEV_LOG)"
mkdir -p .local && chmod 700 .local
# shellcheck disable=SC2086
"$BIN" dev --addr "$ADDR" $DEV_NATS_ARGS >"$DEV_LOG" 2>&1 </dev/null &
DEV_PID=$!

log "waiting up to ${READY_TIMEOUT}s for $BASE_URL/readyz"
deadline=$((SECONDS + READY_TIMEOUT))
while :; do
	code="$(http_status "$BASE_URL/readyz")"
	[ "$code" != 200 ] || break
	if ! kill -0 "$DEV_PID" 2>/dev/null; then
		wait "$DEV_PID" && st=0 || st=$?
		DEV_PID=""
		log "flagdown dev exited (status $st) before it was ready; last lines of $DEV_LOG:"
		tail -n 40 "$DEV_LOG" >&2 || true
		exit 1
	fi
	if ((SECONDS >= deadline)); then
		log "not ready after ${READY_TIMEOUT}s (last /readyz status: $code); last lines of $DEV_LOG:"
		tail -n 40 "$DEV_LOG" >&2 || true
		exit 1
	fi
	sleep 0.5
done
log "platform ready at $BASE_URL"

step "$BIN replay --url $BASE_URL $REPLAY_ARGS"
# The replay ends with the invariant check of `flagdown verify` (same environment as flagdown dev) and
# exits non-zero, after writing its summary, when an invariant_* count is not 0 or the check could not
# run; the demo fails with it.
SUMMARY_MARK=.local/demo-replay.start
touch "$SUMMARY_MARK"
replay_status=0
# With the embedded broker, the replay's check reads its streams too (dead letters, consumer lag).
[ -z "$NATS_PORT" ] || export NATS_URL="nats://127.0.0.1:$NATS_PORT"
# shellcheck disable=SC2086
"$BIN" replay --url "$BASE_URL" --speedup "$FLAGDOWN_SIM_SPEEDUP" $REPLAY_ARGS || replay_status=$?
if [ "$replay_status" -ne 0 ]; then
	if [ -f demo-summary.json ] && [ demo-summary.json -nt "$SUMMARY_MARK" ]; then
		violated="$(grep -Eo '"invariant_[a-z_]+": [1-9][0-9]*' demo-summary.json | tr -d '"' | paste -sd ' ' - || true)"
		if [ -n "$violated" ]; then
			log "INVARIANT VIOLATIONS after the replay: $violated (example ids: verify_examples in demo-summary.json)"
		elif grep -q '"verify_ran": false' demo-summary.json && ! grep -q '"interrupted": true' demo-summary.json; then
			log "the invariants were NOT checked: $(grep -o '"verify_error": "[^"]*"' demo-summary.json || echo 'see above')"
		fi
	fi
	log "replay failed (exit $replay_status)"
	exit "$replay_status"
fi
