# deliverycheck: `make demo` runs a real scenario end to end, `make test`
# runs every test against real servers. Both install what they need first.

GO      ?= go
BIN     := bin/deliverycheck
# Server-backed packages share one machine's two cores: never run them in
# parallel (each starts its own PostgreSQL, Kafka and RabbitMQ).
TESTFLAGS ?= -p 1 -timeout 25m

.PHONY: all build deps test vet demo bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/deliverycheck

deps:
	./scripts/deps.sh

vet:
	$(GO) vet ./...

test: deps vet
	$(GO) test $(TESTFLAGS) ./...

demo: deps build
	$(BIN) demo

bench: deps
	$(GO) test -p 1 -run '^$$' -bench . -benchtime 3x ./cluster/...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzRead -fuzztime 30s ./history

clean:
	rm -rf bin
