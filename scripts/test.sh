#!/usr/bin/env bash
# Runs every bpfleet test on this machine, as root: static checks, generated
# code up to date, the Go tests against the running kernel and real
# backends, the alert rules, and the kernel matrix in qemu.
# KERNELS selects matrix entries (default: the CI set).
set -euo pipefail
cd "$(dirname "$0")/.."
export BPFLEET_CACHE=${BPFLEET_CACHE:-/var/cache/bpfleet}
KERNELS=${KERNELS:-bookworm-amd64,sid-amd64,sid-rt-amd64,sid-arm64}

step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "dependencies"
scripts/install-deps.sh

step "backends: Prometheus, promtool, Jaeger (built once, cached)"
scripts/build-backends.sh

step "format, vet, staticcheck"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
go vet ./...
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

step "generated BPF objects match their sources"
go generate ./...
if ! git diff --quiet -- '*.go' '*.o'; then
  echo "go generate changed committed files: commit the regenerated objects"; git diff --stat; exit 1
fi

step "go test (host kernel, real backends; includes promtool test rules)"
# -p 1: the host tests load real programs on shared tracepoints; running
# packages one at a time keeps their exact-count assertions exact.
go test -p 1 -count=1 -timeout 30m ./...

step "kernel matrix in qemu: $KERNELS"
make test-kernels KERNELS="$KERNELS"

echo
echo "all tests passed"
