# bpfleet: `make run` builds and starts the agent, `make test` runs every test.
BIN := bin/bpfleet
GO_LDFLAGS := -s -w -X main.version=$(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: build run test generate

build:
	CGO_ENABLED=0 go build -trimpath -ldflags '$(GO_LDFLAGS)' -o $(BIN) ./cmd/bpfleet

run: build
	scripts/install-deps.sh
	$(BIN) agent

test:
	scripts/test.sh

generate:
	go generate ./...
