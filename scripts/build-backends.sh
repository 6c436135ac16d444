#!/usr/bin/env bash
# build-backends.sh builds the real OTLP backends the end-to-end tests talk to:
# Prometheus and promtool (github.com/prometheus/prometheus, which has the OTLP
# receiver Debian's package strips) and Jaeger v2 all-in-one
# (github.com/jaegertracing/jaeger cmd/jaeger). Binaries land in
# ${BPFLEET_CACHE:-/var/cache/bpfleet}/bin as <name>-<version>, with a plain
# <name> symlink beside each. A binary of the pinned version that already
# exists is not rebuilt, so the script is cheap to run on every CI run.
#
# Each backend is built in its own throw-away module (own go.mod, -mod=mod) so
# their large dependency trees never enter bpfleet's go.mod.
#
# About 6 min (Prometheus) + 4.5 min (Jaeger) on 2 cores when nothing is cached.
set -euo pipefail

PROMETHEUS_VERSION=v0.316.0
JAEGER_VERSION=v1.75.0

cache=${BPFLEET_CACHE:-/var/cache/bpfleet}
bin=$cache/bin
mkdir -p "$bin"

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

# build MODULE VERSION PKG NAME: build PKG of MODULE@VERSION as $bin/NAME-VERSION.
build() {
	local module=$1 version=$2 pkg=$3 name=$4
	local out=$bin/$name-$version
	if [[ -x $out ]]; then
		echo "build-backends: $name $version cached at $out"
	else
		local dir start
		dir=$(mktemp -d)
		start=$SECONDS
		echo "build-backends: building $name from $pkg@$version ..."
		(
			cd "$dir"
			go mod init bpfleet-backend-build >/dev/null 2>&1
			go get "$pkg@$version"
			go build -trimpath -ldflags "-s -w" -o "$out.tmp" "$pkg"
		)
		mv "$out.tmp" "$out"
		rm -rf "$dir"
		echo "build-backends: built $out in $((SECONDS - start))s"
	fi
	ln -sf "$name-$version" "$bin/$name"
}

build github.com/prometheus/prometheus "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/prometheus prometheus
build github.com/prometheus/prometheus "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/promtool promtool
build github.com/jaegertracing/jaeger "$JAEGER_VERSION" github.com/jaegertracing/jaeger/cmd/jaeger jaeger
