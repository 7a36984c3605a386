#!/usr/bin/env bash
# bench.sh — what `make bench` runs: bring up Redis + PostgreSQL (scripts/services.sh up), make sure
# redis-benchmark and pgbench are installed, build bin/flagdown, run the Go micro-benchmarks
# (validation, scoring, codecs; -benchmem), then `flagdown bench`, which prints one table of every
# figure beside the ceiling measured in the same run and writes it to docs/bench.json and
# docs/bench.md (.local/bench/ with --quick). Stops the services this run started, also on failure.
#
# Environment: GO (go binary, default go), BENCH_ARGS (extra arguments of `flagdown bench`, e.g.
# --quick for the CI smoke run, or --stages match --fleets 1000,100000), SERVICES_ARGS (extra
# arguments of services.sh up), FLAGDOWN_NO_INSTALL=1 (never apt-get).
# Installs, when missing and allowed (root + apt-get): redis-tools (redis-benchmark) and
# postgresql-client (pgbench).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GO="${GO:-go}"
OWNER="make-bench-$$"
log() { printf 'bench: %s\n' "$*" >&2; }

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	scripts/services.sh down --owner "$OWNER" || log "warning: stopping services failed"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

need() { # need BINARY DEBIAN-PACKAGE
	command -v "$1" >/dev/null 2>&1 && return 0
	if [ "${FLAGDOWN_NO_INSTALL:-0}" != 1 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		log "$1 not found: installing the Debian package $2 with apt-get"
		apt-get update -q >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$2" >&2
	fi
	command -v "$1" >/dev/null 2>&1 || { log "$1 not found: install the Debian package $2"; exit 127; }
}
need redis-benchmark redis-tools
need pgbench postgresql-client

# shellcheck disable=SC2086
scripts/services.sh up --owner "$OWNER" ${SERVICES_ARGS:-}
# shellcheck disable=SC1091
. .local/services.env

"$GO" build -o bin/flagdown ./cmd/flagdown
mkdir -p .local
benchtime=300ms
case " ${BENCH_ARGS:-} " in *" --quick "*) benchtime=20ms ;; esac
log "micro-benchmarks: validation, scoring, codecs (-benchmem -benchtime=$benchtime)"
"$GO" test -run '^$' -bench 'Validate|Score|Rank|Codec|Decode|Encode|Fare|Parse' -benchmem -benchtime="$benchtime" \
	./shared/dispatch/ ./shared/cloudevent/ ./shared/httpx/ ./functions/location-update/ | tee .local/bench-micro.txt
# shellcheck disable=SC2086
bin/flagdown bench --micro .local/bench-micro.txt ${BENCH_ARGS:-}
