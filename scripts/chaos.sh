#!/usr/bin/env bash
# chaos.sh — what `make chaos` runs: build bin/flagdown, bring up PostgreSQL (scripts/services.sh up
# --redis-server, which also makes sure redis-server is installed: the chaos run starts and restarts its
# own private Redis on a free port), then run `bin/flagdown chaos $CHAOS_ARGS` against DATABASE_URL, and
# finally stop the services this run started — also on failure or Ctrl-C. The chaos run starts and stops
# its own platform processes (flagdown dev, a second relay and expiry source) and its own redis-server.
#
# Environment: GO (default go), CHAOS_ARGS (default: none, i.e. `flagdown chaos`'s defaults; see
# `bin/flagdown chaos --help`), SERVICES_ARGS (extra arguments for services.sh up), FLAGDOWN_BIN (skip the
# build and use this binary).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
CHAOS_ARGS="${CHAOS_ARGS:-}"
OWNER="make-chaos-$$"
BIN="${FLAGDOWN_BIN:-bin/flagdown}"
SERVICES_UP=0

log() { printf 'chaos: %s\n' "$*" >&2; }
step() { printf '\nchaos: ==> %s\n' "$*" >&2; }

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "$SERVICES_UP" = 1 ]; then
		scripts/services.sh down --owner "$OWNER" || log "warning: stopping services failed"
	fi
	if [ "$rc" -eq 0 ]; then log "done"; else log "FAILED (exit $rc)"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "${FLAGDOWN_BIN:-}" ]; then
	step "$GO build -o bin/flagdown ./cmd/flagdown"
	"$GO" build -o bin/flagdown ./cmd/flagdown
fi

step "scripts/services.sh up --redis-server ${SERVICES_ARGS:-}"
SERVICES_UP=1
# shellcheck disable=SC2086
scripts/services.sh up --owner "$OWNER" --redis-server ${SERVICES_ARGS:-}
# shellcheck disable=SC1091
. .local/services.env

step "$BIN chaos $CHAOS_ARGS"
# shellcheck disable=SC2086
"$BIN" chaos $CHAOS_ARGS
