# bpfleet: `make run` builds and starts the agent, `make test` runs every test.
BIN := bin/bpfleet
GO_LDFLAGS := -s -w -X main.version=$(shell git describe --always --dirty 2>/dev/null || echo dev)

# KERNELS selects kernel-matrix entries (comma separated; default all):
#   make test-kernels KERNELS=sid-arm64
# KERNEL_FLAGS passes more harness flags, e.g. KERNEL_FLAGS="-cmd 'bpfleet probe -o json'".
KERNELS ?=
BENCH ?= all
KERNEL_FLAGS ?=

.PHONY: build run test bench generate test-kernels fuzz

# Two binaries from ./cmd/bpfleet: bin/bpfleet, the command-line tools
# (-tags lean: no OTLP exporters, gRPC, Prometheus client or client-go, whose
# init alone would cost every `bpfleet list` ~3 ms), and bin/bpfleet-agent,
# every command with the agent in-process. `bpfleet agent` execs
# bpfleet-agent from its own directory.
build:
	CGO_ENABLED=0 go build -trimpath -tags lean -ldflags '$(GO_LDFLAGS)' -o $(BIN) ./cmd/bpfleet
	CGO_ENABLED=0 go build -trimpath -ldflags '$(GO_LDFLAGS)' -o $(BIN)-agent ./cmd/bpfleet

run: build
	scripts/install-deps.sh
	$(BIN) agent

test:
	scripts/test.sh

# BENCH selects sections of scripts/bench.sh (comma separated; default all).
bench:
	BENCH=$(BENCH) scripts/bench.sh

generate:
	go generate ./...

# Every fuzz target for FUZZTIME each (default 20s); README lists the last run.
fuzz:
	scripts/fuzz.sh

test-kernels:
	go run ./test/kernels -kernels "$(KERNELS)" $(KERNEL_FLAGS)
