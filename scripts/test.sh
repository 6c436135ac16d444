#!/usr/bin/env bash
# Runs every bpfleet test on this machine, as root: static checks, generated
# code up to date, the Go tests against the running kernel and real
# backends, the alert rules, and the kernel matrix in qemu.
# KERNELS selects matrix entries (default: the CI set).
set -euo pipefail
cd "$(dirname "$0")/.."
export BPFLEET_CACHE=${BPFLEET_CACHE:-/var/cache/bpfleet}
KERNELS=${KERNELS:-bullseye-amd64,bookworm-amd64,sid-amd64,sid-rt-amd64,sid-arm64}

step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "dependencies"
scripts/install-deps.sh

# The backends (built from their Go modules once, then cached) take most of a
# cold run: build them in the background while the static checks, the host
# tests that need no backend and the kernel matrix run, and wait for them
# only where needed.
step "backends: Prometheus, promtool, Jaeger, the Collector, etcd, kube-apiserver, kube-node, containerd, VictoriaMetrics (built once, cached; in the background)"
backends_log=$(mktemp)
scripts/build-backends.sh >"$backends_log" 2>&1 &
backends_pid=$!
wait_backends() {
  step "waiting for the backends"
  if ! wait "$backends_pid"; then
    echo "building the backends failed:"; cat "$backends_log"; exit 1
  fi
  grep -E '^build-backends:' "$backends_log" || true
}
trap 'kill "$backends_pid" 2>/dev/null || true' EXIT

step "format, vet, staticcheck"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi
go vet ./...
go vet -tags bench ./...
go vet -tags lean ./cmd/bpfleet # the CLI build (make build), whose agent command execs bpfleet-agent
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

step "generated files (BPF objects, METRICS.md, dashboards) match their sources"
go generate ./...
if ! git diff --quiet -- '*.go' '*.o' exporter/METRICS.md charts/bpfleet/dashboards; then
  echo "go generate changed committed files: commit the regenerated files"; git diff --stat; exit 1
fi

# Packages whose tests start a backend (they import a backends helper or
# live under test/cluster) wait for the build; the others run now.
mapfile -t all_pkgs < <(go list ./...)
mapfile -t backend_pkgs < <(go list -f '{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
  awk '$1 ~ /\/test\/cluster/ || / [^ ]*\/backends( |$)/ {print $1}')
host_pkgs=()
for p in "${all_pkgs[@]}"; do
  [[ " ${backend_pkgs[*]} " == *" $p "* ]] || host_pkgs+=("$p")
done

# -p 1: the host tests load real programs on shared tracepoints; running
# packages one at a time keeps their exact-count assertions exact.
step "go test, host kernel (${#host_pkgs[@]} packages)"
go test -p 1 -count=1 -timeout 30m "${host_pkgs[@]}"

# The matrix needs no backend either: on a cold machine it runs while the
# backends still build (their compiles fill the gaps its guests leave: kernel
# downloads, boots, waits), so only the backend tests remain after the build.
step "kernel matrix in qemu: $KERNELS"
make test-kernels KERNELS="$KERNELS"

wait_backends
step "go test, real backends (${#backend_pkgs[@]} packages: ${backend_pkgs[*]##*/bpfleet/})"
go test -p 1 -count=1 -timeout 30m "${backend_pkgs[@]}"

echo
echo "all tests passed"
