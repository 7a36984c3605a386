#!/bin/sh
# build.sh — the one build step of the golang-flagdown template, run by its Dockerfile inside the
# faas-cli build context and by scripts/buildcontext.sh in the same layout without Docker.
#
#   build.sh OUTPUT       (working directory: the build context, i.e. build/<function>/)
#
# function/ must be the flagdown module with the function's files at its root: go.mod and go.sum
# from stack.yml's configuration.copy, plus shared/, events/ and migrations/. The template's main.go
# goes to function/cmd/openfaas-handler/ and is built with -mod=readonly, so a go.sum missing an
# entry fails here exactly as it would in the image build. main.go carries //go:build ignore (it
# imports the function as the module's root package, which exists only here, so go mod tidy in the
# repository must not see it); it is built by naming the file, to which go build applies no build
# constraints. GOFLAGS, GOPROXY, CGO_ENABLED, GOOS and GOARCH come from the caller's environment.
set -eu

out="${1:?usage: build.sh OUTPUT}"
[ -f function/go.mod ] || { echo "build.sh: function/go.mod missing: add ./go.mod to configuration.copy in stack.yml" >&2; exit 1; }
[ -f function/go.sum ] || { echo "build.sh: function/go.sum missing: add ./go.sum to configuration.copy in stack.yml" >&2; exit 1; }
grep -q '^module github.com/flagdown/flagdown$' function/go.mod || { echo "build.sh: function/go.mod is not the flagdown module" >&2; exit 1; }
ls function/*.go >/dev/null 2>&1 || { echo "build.sh: no handler .go files in function/" >&2; exit 1; }

mkdir -p function/cmd/openfaas-handler
cp main.go function/cmd/openfaas-handler/main.go
cd function
go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out" ./cmd/openfaas-handler/main.go
