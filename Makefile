# deliverycheck: `make demo` runs a real scenario end to end, `make test`
# runs every test against real servers. Both install what they need first.

GO      ?= go
NODE    ?= node
NPM     ?= npm
BIN     := bin/deliverycheck
# Server-backed packages share one machine's two cores: never run them in
# parallel (each starts its own PostgreSQL, Kafka and RabbitMQ). Inside a
# package, up to four tests marked parallel run at once: runs that leave
# the servers alone mostly wait (pipeline: 198 s with two, 154 s).
TESTFLAGS ?= -p 1 -parallel 4 -timeout 45m

# The images `make containers` builds from Debian packages (images/): the
# tests run the containers runtime on these, not on pulled official ones.
IMAGES := DELIVERYCHECK_IMAGE_POSTGRES=localhost/deliverycheck/postgres:17 \
	DELIVERYCHECK_IMAGE_RABBITMQ=localhost/deliverycheck/rabbitmq:4.0 \
	DELIVERYCHECK_IMAGE_KAFKA=localhost/deliverycheck/kafka:4.1.1

.PHONY: all build deps containers servers compile node-example test vet demo bench fuzz matrix clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/deliverycheck

deps:
	./scripts/deps.sh

# A container engine (Docker, or Podman started here) and the images.
containers:
	./scripts/containers.sh

# What the tests run on: the servers installed, then the images built.
servers: deps
	$(MAKE) --no-print-directory containers

vet:
	$(GO) vet ./...

# Compiles every test binary (in parallel, unlike `go test -p 1`) so the
# runs below only link; runs nothing.
compile: vet
	$(GO) test -count=1 -c -o $(CURDIR)/.testbin/ ./... >/dev/null
	rm -rf $(CURDIR)/.testbin
	cd examples/consumer && $(GO) vet ./... && $(GO) vet -tags buggy ./...
	cd examples/processor && $(GO) vet ./... && $(GO) vet -tags buggy ./...

# The Node.js example consumer's packages (amqplib, kafkajs, pg), exactly
# as its committed lock file says (node_modules is not committed), then a
# syntax check of its files and a load of both builds' modules.
node-example:
	cd examples/consumer-node && $(NPM) ci --no-audit --no-fund --loglevel=error \
		&& for f in *.js src/*.js; do $(NODE) --check $$f || exit 1; done \
		&& $(NODE) -e "require('./src/main'); require('./src/settle'); require('./src/settle-buggy'); require('./src/processor')"

# Both runtimes are tested, and every server-backed test runs: a missing
# server, tool or container engine fails the run instead of skipping the
# tests that need it (internal/testenv). Installing the servers and
# building the images (mostly download and unpack) overlap with compiling,
# which needs neither; the Node.js example's packages wait for deps, which
# installs npm where it is missing. The Go example is its own module,
# outside ./...: its unit tests (no servers) run first.
test:
	$(MAKE) -j2 --no-print-directory servers compile
	$(MAKE) --no-print-directory node-example
	cd examples/consumer && $(GO) test -count=1 ./...
	$(IMAGES) DELIVERYCHECK_REQUIRE_SERVERS=1 DELIVERYCHECK_REQUIRE_CONTAINERS=1 $(GO) test $(TESTFLAGS) ./...

# A real scenario end to end: order confirmations consumed by inventory and
# email on RabbitMQ, with a relay crash, paused consumers and poison events.
demo: deps build
	$(BIN) run order-confirmation --duration 10s --out runs

bench: deps containers
	$(IMAGES) $(GO) test -p 1 -run '^$$' -bench . -benchtime 3x ./cluster/...
	$(GO) test -run '^$$' -bench 'BenchmarkPipeline$$' -benchtime 3x -timeout 30m ./pipeline
	$(GO) test -run '^$$' -bench 'BenchmarkStage$$' -benchtime 3x -timeout 30m ./pipeline

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReadLine -fuzztime 30s ./history
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./scenarios
	$(GO) test -run '^$$' -fuzz FuzzParseStep -fuzztime 30s ./nemesis
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./failpoint
	$(GO) test -run '^$$' -fuzz FuzzValidate -fuzztime 30s ./pipeline/consumer
	$(GO) test -run '^$$' -fuzz FuzzBind -fuzztime 30s ./pipeline/producer

# Every built-in scenario over 20 seeds: detection rate per known-bad cell,
# false positives of the correct ones (3 to 4 hours on 2 cores; not part of
# CI). ONLY=bad-,debezium- keeps the scenarios with those name prefixes.
matrix: deps
	DELIVERYCHECK_MATRIX_SEEDS=$${SEEDS:-20} DELIVERYCHECK_MATRIX_OUT=$(CURDIR)/matrix.md DELIVERYCHECK_MATRIX_ONLY=$${ONLY:-} \
		$(GO) test -count=1 -run TestDetectionRates -timeout 6h -v ./runner

clean:
	rm -rf bin
