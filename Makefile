# Common tasks. `make test` and `make bench` start a throwaway redis-server
# on a free loopback port for the run and point REDIS_URL at it (see
# .ci/with-redis); it is stopped afterwards, also when tests fail. `make
# test` also needs Chromium for the playground's browser tests, and Node's
# npx for the MCP tests (servers from npm); like redis-server, they are
# installed with apt-get when missing and run as root.

GO ?= go

.PHONY: test bench run

## test: all tests, with the race detector, against a real Redis (and
## headless Chromium for the browser tests, and npx for the MCP tests)
test:
	bash .ci/with-redis --chromium --node $(GO) test -race ./...

## bench: all benchmarks (BenchmarkCheckpointSave in redisstore among them)
bench:
	bash .ci/with-redis $(GO) test -run '^$$' -bench . -benchmem ./...

## run: the bot, configured from the environment (see README.md)
run:
	$(GO) run ./cmd/bot
