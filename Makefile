# Common tasks. `make test` and `make bench` start a throwaway redis-server
# on a free loopback port for the run and point REDIS_URL at it (see
# .ci/with-redis); it is stopped afterwards, also when tests fail. `make
# test` also needs Chromium for the playground's browser tests, and Node's
# npx for the MCP tests (servers from npm); like redis-server, they are
# installed with apt-get when missing and run as root.

GO ?= go

.PHONY: test bench bench-long run lint fuzz

## test: all tests, with the race detector, against a real Redis (and
## headless Chromium for the browser tests, and npx for the MCP tests)
test:
	bash .ci/with-redis --chromium --node $(GO) test -race ./...

## bench: all benchmarks (BenchmarkCheckpointSave in redisstore among them)
bench:
	bash .ci/with-redis $(GO) test -run '^$$' -bench . -benchmem ./...

## bench-long: the long-thread benchmark alone: 100 turns through the bot's
## wiring, with Redis commands, round trips, bytes each way and p50/p99 per
## turn at turns 1, 10, 50 and 100
bench-long:
	bash .ci/with-redis $(GO) test -run '^$$' -bench BenchmarkLongThread -benchtime 1x ./internal/cyclebench/

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
FUZZ_TARGETS = \
	./graph:FuzzNestedCheckpoint \
	./handlers:FuzzVerify \
	./handlers:FuzzInteractionPayload \
	./handlers:FuzzDecisionPath \
	./handlers:FuzzHomeDecisionPath \
	./handlers:FuzzElicitForm \
	./handlers:FuzzCards \
	./handlers:FuzzReachText \
	./slackui:FuzzMrkdwn \
	./slackui:FuzzMarkdown \
	./slackui:FuzzPlainText \
	./tools:FuzzCanonical \
	./tools:FuzzParsePolicy \
	./tools:FuzzParseMCPServers \
	./tools:FuzzAllowHostsDialled \
	./tools:FuzzMaskSecrets \
	./tools:FuzzRedact \
	./tools:FuzzRedactURL \
	./tools/mcp:FuzzToolName \
	./mcpauth:FuzzOpen \
	./mcpauth:FuzzParseKey \
	./mcpauth:FuzzCallbackQuery \
	./mcpauth:FuzzWWWAuthenticate \
	./llm:FuzzNormaliseTool \
	./llm:FuzzReadAnswer \
	./audit:FuzzCanonical \
	./audit:FuzzExport \
	./internal/termtext:FuzzText
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		bash .ci/with-redis $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime=$(FUZZTIME) $$pkg; \
	done
