# flagdown — developer entry points. On a fresh Debian 12 machine `make test` and `make demo` are all you
# need: scripts/services.sh finds a running Redis/PostgreSQL, or starts private ones under .local/
# (installing the Debian packages if necessary), and stops what it started afterwards.
# `make help` lists the targets.

GO ?= go
# The demo replays the file's first 20 minutes: the demand 2,000 drivers can serve (docs/demo.md "make demo").
REPLAY_ARGS ?= --minutes 20 --skip-minutes 0
BENCH_ARGS ?=
GOTEST_FLAGS ?= -race -count=1 -timeout 20m
BENCH_FLAGS ?= -run '^$$' -bench . -benchmem
PKGS ?= ./...

export GO GOTEST_FLAGS REPLAY_ARGS SERVICES_ARGS CHAOS_ARGS BENCH_ARGS

.DEFAULT_GOAL := help
.PHONY: help test dev demo chaos build services services-down services-env fmt vet bench bench-go clean

help: ## list the targets
	@echo "flagdown make targets:"
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | awk -F'\t' '{ printf "  %-15s %s\n", $$1, $$2 }'
	@echo "variables: GO=$(GO) REPLAY_ARGS='$(REPLAY_ARGS)' GOTEST_FLAGS='$(GOTEST_FLAGS)' FLAGDOWN_ADDR (demo)"
	@echo "services knobs: FLAGDOWN_REDIS_PORT / FLAGDOWN_PG_PORT (ports probed), SERVICES_ARGS=--private (see scripts/services.sh)"

test: ## services up and a private Redis Cluster, gofmt check, go vet, go test -race; stops what it started (also on failure)
	GOTEST_PKGS='$(PKGS)' scripts/test.sh

dev: ## build, services up, run `flagdown dev` in the foreground with a fresh token secret, print the gateway URL and a curl walkthrough; Ctrl-C stops it and the services it started
	scripts/dev.sh

demo: ## build, services up, migrate, run `flagdown dev` and replay NYC trips against it, then stop everything
	scripts/demo.sh

chaos: ## build, services up, replay trips while killing/restarting the platform, Redis and the relay; check nothing was lost (CHAOS_ARGS)
	scripts/chaos.sh

build: ## build bin/flagdown
	$(GO) build -o bin/flagdown ./cmd/flagdown

services: ## find or start Redis + PostgreSQL and write .local/services.env (left running)
	scripts/services.sh up $(SERVICES_ARGS)
	@echo "use them with: . .local/services.env"

services-down: ## stop the Redis/PostgreSQL that scripts/services.sh started (never ones it found running)
	scripts/services.sh down

services-env: ## print .local/services.env
	@scripts/services.sh env

fmt: ## gofmt -w the Go sources
	git ls-files -co --exclude-standard -- '*.go' | grep -Ev '(^|/)(testdata|vendor)/' | xargs -r "$$($(GO) env GOROOT)/bin/gofmt" -w

vet: ## go vet
	$(GO) vet $(PKGS)

bench: ## services up, the raw ceilings (redis-benchmark, pgbench) and flagdown's figures in one table, as ratios (docs/bench.md; BENCH_ARGS=--quick: smoke run)
	BENCH_ARGS='$(BENCH_ARGS)' scripts/bench.sh

bench-go: ## every Go benchmark of PKGS with -benchmem (uses .local/services.env if present)
	@if [ -f .local/services.env ]; then . ./.local/services.env; fi; \
	echo "$(GO) test $(BENCH_FLAGS) $(PKGS)"; \
	$(GO) test $(BENCH_FLAGS) $(PKGS)

clean: ## remove bin/ and stop + delete the private service data (.local/)
	scripts/services.sh clean
	rm -rf bin

.PHONY: build-context
build-context: ## lay out faas-cli's build context of every function (.local/build/<fn>) and go build each, offline
	scripts/buildcontext.sh -o .local/build
