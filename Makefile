# bpfleet: `make run` builds and starts the agent, `make test` runs every test.
BIN := bin/bpfleet
# A fixed --abbrev: git's default grows with the clone's object count, and
# the version is in the binaries' bytes.
VERSION := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo dev)
# -trimpath and an empty build id: the same commit and Go toolchain give the
# same bytes on any machine (make image's digest depends on it).
GO_LDFLAGS := -s -w -buildid= -X main.version=$(VERSION)
# The image's binaries are built by exactly go.mod's toolchain (GOTOOLCHAIN
# fetches it through the module proxy where the installed Go differs): the
# same commit gives the same image whichever Go the machine has.
GO_TOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)

# make image PUSH=registry.example/bpfleet:0.1.0 also pushes the image there.
# IMAGE is the name the tar gives it for `ctr images import` and kind: by
# default the chart's image at its appVersion.
PUSH ?=
IMAGE ?= $(or $(PUSH),ghcr.io/bpfleet/bpfleet:$(shell sed -n 's/^appVersion: *"\(.*\)"/\1/p' charts/bpfleet/Chart.yaml))

# KERNELS selects kernel-matrix entries (comma separated; default all):
#   make test-kernels KERNELS=sid-arm64
# KERNEL_FLAGS passes more harness flags, e.g. KERNEL_FLAGS="-cmd 'bpfleet probe -o json'".
KERNELS ?=
BENCH ?= all
KERNEL_FLAGS ?=

.PHONY: build image run test bench soak generate test-kernels fuzz

# Two binaries from ./cmd/bpfleet: bin/bpfleet, the command-line tools
# (-tags lean: no OTLP exporters, gRPC, Prometheus client or client-go, whose
# init alone would cost every `bpfleet list` ~3 ms), and bin/bpfleet-agent,
# every command with the agent in-process. `bpfleet agent` execs
# bpfleet-agent from its own directory.
# $(call binaries,GO-ENV,DIR) builds both into DIR with more go env.
define binaries
CGO_ENABLED=0 $(1) go build -trimpath -tags lean -ldflags '$(GO_LDFLAGS)' -o $(2)/bpfleet ./cmd/bpfleet
CGO_ENABLED=0 $(1) go build -trimpath -ldflags '$(GO_LDFLAGS)' -o $(2)/bpfleet-agent ./cmd/bpfleet
endef
build:
	$(call binaries,,bin)

# bin/bpfleet-image.tar: an OCI image layout tar of a linux/amd64 and
# linux/arm64 index, each image the two binaries of `make build` at
# /bpfleet and /bpfleet-agent (cmd/bpfleet-image). Same commit, same digest:
# revision, version and every time in it come from git, not the clock.
image:
	$(call binaries,GOTOOLCHAIN=$(GO_TOOLCHAIN) GOOS=linux GOARCH=amd64 GOAMD64=v1,bin/linux-amd64)
	$(call binaries,GOTOOLCHAIN=$(GO_TOOLCHAIN) GOOS=linux GOARCH=arm64 GOARM64=v8.0,bin/linux-arm64)
	go run ./cmd/bpfleet-image -o bin/bpfleet-image.tar -name '$(IMAGE)' $(if $(PUSH),-push '$(PUSH)') \
	  -revision $$(git rev-parse HEAD) -version '$(VERSION)' -created $$(git log -1 --format=%cI) \
	  -platform linux/amd64=bin/linux-amd64 -platform linux/arm64/v8=bin/linux-arm64

run: build
	scripts/install-deps.sh
	$(BIN) agent

test:
	scripts/test.sh

# BENCH selects sections of scripts/bench.sh (comma separated; default all).
bench:
	BENCH=$(BENCH) scripts/bench.sh

# Every generated file: the BPF objects (bpf2go in each gen.go, clang-14
# from scripts/install-deps.sh), exporter/METRICS.md and the chart's
# dashboards (exporter/internal/gendocs, Go only).
# scripts/test.sh runs the same and fails if the committed files differ.
# The long-haul scenarios (not part of make test, which runs their short
# versions): BPFLEET_SOAK=long, docs/testing.md, "Soak", says how long each
# runs and what it prints. SOAK selects scenarios by test name (a go test -run
# pattern; default all).
SOAK ?= TestSoak
# STATS sets the soak agents' --stats mode (off: run beside other BPF tests,
# which an agent holding stats for an hour would disturb); empty: each
# scenario's own.
STATS ?=
soak:
	scripts/install-deps.sh
	scripts/build-backends.sh prometheus jaeger otelcol
	BPFLEET_SOAK=long BPFLEET_SOAK_STATS=$(STATS) BPFLEET_CACHE=$${BPFLEET_CACHE:-/var/cache/bpfleet} go test -count=1 -v -timeout 4h -run '$(SOAK)' ./exporter/e2e

generate:
	go generate ./...

# Every fuzz target for FUZZTIME each (default 20s); docs/testing.md,
# "Fuzzing", lists the last run.
fuzz:
	scripts/fuzz.sh

test-kernels:
	go run ./test/kernels -kernels "$(KERNELS)" $(KERNEL_FLAGS)
