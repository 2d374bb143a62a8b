# lockgate — build and test. `make test` is the one test command (README,
# .ci/run): it installs the servers the tests need, checks formatting, vets,
# and runs every test with the race detector.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -X github.com/lockgate/lockgate/internal/cli.Version=$(VERSION) \
            -X github.com/lockgate/lockgate/internal/cli.Commit=$(COMMIT)
# The whole suite must stay well under 15 minutes on 2 cores.
TEST_TIMEOUT ?= 14m

.PHONY: all deps build fmt-check vet test unit-tests test-short fuzz-smoke clean console

all: build

## deps: install the servers and tools the tests run where missing
## (scripts/install-deps.sh), and build helm for the chart's tests
deps:
	./scripts/install-deps.sh
	./scripts/build-helm.sh

## build: build bin/lockgate and, beside it (where it finds lockgate), bin/lockgate-bench
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/lockgate ./cmd/lockgate
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/lockgate-bench ./cmd/lockgate-bench

## fmt-check: fail if any Go file is not gofmt-formatted
fmt-check:
	@files=$$(gofmt -l .); \
	if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi

## vet: go vet every package
vet:
	$(GO) vet ./...

## test: deps, format check, vet, then every test with the race detector
## beside a short run of each fuzz target (the fuzzers use the CPU that the
## tests leave idle while they wait on servers and timers)
test: deps fmt-check vet
	$(MAKE) -j2 --output-sync=line unit-tests fuzz-smoke

## unit-tests: every package's tests with the race detector, four packages
## at a time, the longest-running first (go test starts packages in the order
## it is given them): started last, one of them would run on alone at the
## end while the rest of the machine idles
SLOW_PACKAGES := backend/raftlock bench/campaign client clients bench/matrix \
	backend/zklike bench/latency backend/redlock internal/cli backend/sqllock
unit-tests:
	$(GO) test -race -count=1 -p 4 -timeout $(TEST_TIMEOUT) \
		$(addprefix ./,$(SLOW_PACKAGES)) \
		$$($(GO) list ./... | grep -vxF $(addprefix -e github.com/lockgate/lockgate/,$(SLOW_PACKAGES)))

## fuzz-smoke: run each fuzz target briefly (the untrusted-input parsers).
## Budgets are execution counts (about 5 s each here), not durations: a
## duration-based -fuzztime can fail with a bare "context deadline exceeded"
## when it expires under load (golang/go#75804, unfixed in Go 1.26).
fuzz-smoke:
	$(GO) test -run '^$$' -fuzz '^FuzzFrame$$' -fuzztime 20000x ./gateway
	$(GO) test -run '^$$' -fuzz '^FuzzREST$$' -fuzztime 20000x ./gateway
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 50000x ./backend/raftlock/fsm
	$(GO) test -run '^$$' -fuzz '^FuzzRestore$$' -fuzztime 150000x ./backend/raftlock/fsm
	$(GO) test -run '^$$' -fuzz '^FuzzReplay$$' -fuzztime 3000x ./fencedstore
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime 75000x ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeReply$$' -fuzztime 75000x ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzAppendJSON$$' -fuzztime 15000x ./internal/wire

## test-short: quick run without the race detector or the slow suites
test-short:
	$(GO) test -short ./...

clean:
	rm -rf bin

## console: build the web console (console/web → console/assets, embedded in
## the binary) with clients/js's TypeScript; the TypeScript client is
## compiled from its sources in the same run (console/assets/js/clients/js/src).
## The output is deterministic; CONSOLE_OUT=DIR builds into DIR instead (to
## compare with the committed console/assets)
console:
	@test -d clients/js/node_modules || (cd clients/js && npm ci --no-audit --no-fund)
	rm -rf $(or $(CONSOLE_OUT),console/assets)/js
	mkdir -p $(or $(CONSOLE_OUT),console/assets)
	clients/js/node_modules/.bin/tsc -p console/web/tsconfig.json --outDir $(or $(CONSOLE_OUT),console/assets)/js
	cp console/web/index.html console/web/style.css $(or $(CONSOLE_OUT),console/assets)/
