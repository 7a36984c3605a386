#!/usr/bin/env bash
# buildcontext.sh — what `make build-context` runs: for each function of stack.yml (or the ones
# named), lay out the Docker build context faas-cli would create (build/<function>/: the
# golang-flagdown template, the handler in function/, configuration.copy paths under function/) and
# build it with the template's own build step, offline from the module cache (GOPROXY=off), so a
# go.sum gap or a missing copy path fails here as it would in `faas-cli build`.
#
#   scripts/buildcontext.sh [-o .local/build] [function ...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
GO="${GO:-go}"
exec env GOPROXY=off GOFLAGS=-mod=mod GOWORK=off "$GO" run ./internal/deploycheck/cmd/buildcontext -f stack.yml "$@"
