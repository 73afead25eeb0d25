# Common tasks. Tests come in two tiers (docs/testing.md): `make test-fast`
# needs nothing but Go — Redis is the bot's in-process one, and the tests
# that need a real redis-server, a Redis Cluster, Chromium or Node skip,
# saying that `make test` runs them. `make test` and `make bench` start a
# throwaway redis-server on a free loopback port for the run and point
# REDIS_URL at it (see .ci/with-redis); it is stopped afterwards, also when
# tests fail. `make test` also needs Chromium for the playground's browser
# tests, and Node's npx for the MCP tests (servers from npm); like
# redis-server, they are installed with apt-get when missing and run as
# root. Both print progress through internal/testprogress (.ci/gotest).

GO ?= go

.PHONY: test test-fast bench bench-long bench-thread bench-paused chaos run lint fuzz

## test: all tests, with the race detector, against a real Redis (and
## headless Chromium for the browser tests, and npx for the MCP tests).
## Six tests of a package at a time: those of cmd/bot mostly wait (for
## leases, holds, processes), and with four the package used about one
## of the two cores. Programs built with -race exit without the
## race detector's second of sleep (GORACE=atexit_sleep_ms=0; a GORACE of
## your own still has the last word). cmd/bot, the longest, is named
## first: go test starts packages' tests in the order they are named, and
## builds first what the first one needs, so its tests start as soon as
## its own packages are built rather than after four others' are.
test:
	GO=$(GO) GORACE="atexit_sleep_ms=0 $$GORACE" bash .ci/with-redis --chromium --node \
		bash .ci/gotest -race -parallel 6 -timeout 30m $(TESTFLAGS) ./cmd/bot/ ./...

## test-fast: go test -short: no server outside the test process (the
## in-process Redis; no redis-server, Cluster, Chromium or Node), in
## under two minutes on two cores. REDIS_URL is ignored.
test-fast:
	env -u REDIS_URL GO=$(GO) bash .ci/gotest -short $(TESTFLAGS) ./...

## bench: all benchmarks (BenchmarkCheckpointSave in redisstore among them)
bench:
	bash .ci/with-redis $(GO) test -run '^$$' -bench . -benchmem ./...

## bench-long: the long-thread benchmark alone: 100 turns through the bot's
## wiring, with Redis commands, round trips, bytes each way and p50/p99 per
## turn at turns 1, 10, 50 and 100
bench-long:
	bash .ci/with-redis $(GO) test -run '^$$' -bench BenchmarkLongThread -benchtime 1x ./internal/cyclebench/

## bench-thread: the long thread through the bot binary as it serves Slack
## (signed thread replies, cards, clicks on Approve; Slack and model
## fakes): per turn at turns 1, 2, 10, 50 and 100, the Redis commands,
## round trips and bytes each way from the bot's /metrics, the commands
## Redis ran in all (scripts' included), p50/p99; and the
## countersign_redis_* lines of one turn. THREAD_FLAGS passes -thread.*
## flags, e.g. THREAD_FLAGS='-thread.threads 1'.
THREAD_FLAGS ?=
bench-thread:
	bash .ci/with-redis $(GO) test -run '^$$' -bench BenchmarkLongThreadThroughSlack -benchtime 1x ./cmd/bot/ $(THREAD_FLAGS)

## bench-paused: Redis memory of 10,000 threads paused on an approval, as
## the bot binary keeps them (the Slack and model fakes): MB per 10,000
## threads, MEMORY USAGE and expiry by kind of key, and the key tables.
## PAUSED_FLAGS=-paused.threads=1000 for a quicker run.
PAUSED_FLAGS ?=
bench-paused:
	bash .ci/with-redis $(GO) test -run '^$$' -bench BenchmarkPausedThreadsThroughSlack -benchtime 1x ./cmd/bot/ $(PAUSED_FLAGS)

## chaos: the failover driver (the chaos build tag): FAILOVER_RUNS
## conversations on a Redis Cluster, each with its thread's master failed
## over at a close, a reply's intake or a claim, by CLUSTER FAILOVER or by
## a kill, or with a replica lagging at an /agent's intake, a claim, the
## save of a call as running or an inbox entry, then its master killed or the replica
## caught up; prints how many had a duplicate, lost or stuck outcome.
## FAILOVER_MOMENTS="lagging running save" (commas between) picks moments
FAILOVER_RUNS ?= 12
FAILOVER_MOMENTS ?=
chaos:
	bash .ci/with-redis $(GO) test -tags chaos -count=1 -timeout 60m ./cmd/bot/ -run '^TestFailoverChaos$$' -failover.n=$(FAILOVER_RUNS) -failover.moments="$(FAILOVER_MOMENTS)" -v

## run: the bot, configured from the environment (see README and docs/configuration.md)
run:
	$(GO) run ./cmd/bot

## lint: gofmt, go vet, go mod tidy and staticcheck; fails on any finding.
## staticcheck is installed with go install when it is not on PATH.
STATICCHECK_VERSION ?= v0.8.2
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l: these files need gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	@command -v staticcheck >/dev/null || [ -x "$$($(GO) env GOPATH)/bin/staticcheck" ] || \
		$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	PATH="$$PATH:$$($(GO) env GOPATH)/bin" staticcheck ./...

## fuzz: each fuzz test for FUZZTIME (default 1m), one target at a time, as
## go test allows one -fuzz target per package run. `make test` runs their
## seed corpora.
FUZZTIME ?= 1m
# Every fuzz test of the module, found in the source: a new one is run
# without being listed here. FUZZ_TARGETS='./pkg:FuzzName ...' runs some.
FUZZ_TARGETS ?= $(shell grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | \
	sed -E 's|/[^/]*_test\.go:func |:|' | sort)
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		bash .ci/with-redis $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done
