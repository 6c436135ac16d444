#!/usr/bin/env bash
# build-backends.sh builds the real OTLP backends the end-to-end tests talk to:
# Prometheus and promtool (github.com/prometheus/prometheus, which has the OTLP
# receiver Debian's package strips) and Jaeger v2 all-in-one
# (github.com/jaegertracing/jaeger cmd/jaeger), and an OpenTelemetry Collector
# (otlp receiver, batch processor, otlp and otlphttp exporters) built with the
# collector builder (ocb) from go.opentelemetry.io/collector modules, so the
# e2e tests put a real Collector between the agent and the backends, as fleets
# do. Binaries land in
# ${BPFLEET_CACHE:-/var/cache/bpfleet}/bin as <name>-<version>, with a plain
# <name> symlink beside each. A binary of the pinned version that already
# exists is not rebuilt, so the script is cheap to run on every CI run.
#
# Each backend is built in its own throw-away module (own go.mod, -mod=mod) so
# their large dependency trees never enter bpfleet's go.mod.
#
# It also builds kube-apiserver (k8s.io/kubernetes) and an embedded etcd for
# the real-cluster tests in test/cluster.
#
# About 4.6 min (Prometheus and promtool, without service discovery: see
# PROMETHEUS_TAGS) + 4.5 min (Jaeger) on 2 cores when nothing is cached;
# kube-apiserver 19 min wall on a fresh 2-core machine (26 min on a busy one,
# module downloads included), etcd 2 min, the Collector 5.7 min (busy 2-core
# machine, module downloads included).
#
# With arguments, only the named binaries are built (and the symlinks set):
#   scripts/build-backends.sh kube-apiserver etcd
set -euo pipefail

PROMETHEUS_VERSION=v0.316.0
JAEGER_VERSION=v1.75.0
KUBERNETES_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
CONTAINERD_VERSION=v2.4.2
# All go.opentelemetry.io/collector modules at one release; ocb of the same
# release picks the matching 1.x versions of the stable modules (confmap
# providers) itself.
OTELCOL_VERSION=v0.165.0
# VictoriaMetrics (Apache-2.0): the single-node store, vmagent, vmalert,
# vmalert-tool and vmauth, for the multi-node shape in test/backends (vm.go).
# The cluster binaries are on its cluster branch only (-cluster tags), which
# the module proxy does not serve.
VM_VERSION=v1.151.0
VM_MODULE=github.com/VictoriaMetrics/VictoriaMetrics
# The tests scrape static targets and read OTLP only: without its
# service-discovery plugins (the cloud SDKs, AWS EC2's above all) Prometheus
# and promtool build in 0.54x the wall time and 0.29x the compiler's peak
# memory (278 s vs 518 s, 0.95 vs 3.3 GB, one run on 2 cores, empty Go build
# cache); on a small CI machine the full build beside the static checks took
# 29 min. promtool keeps the Kubernetes and file discovery it imports itself.
PROMETHEUS_TAGS=remove_all_sd

cache=${BPFLEET_CACHE:-/var/cache/bpfleet}
bin=$cache/bin
mkdir -p "$bin"

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

# cached NAME VERSION WHAT STEP [ARGS...]: unless $bin/NAME-VERSION exists,
# run STEP ARGS... in a throw-away directory (its working directory), which
# must leave the binary there as ./out; then point $bin/NAME at it.
cached() {
	local name=$1 version=$2 what=$3
	shift 3
	local out=$bin/$name-$version
	if [[ -x $out ]]; then
		echo "build-backends: $name $version cached at $out"
	else
		local dir start=$SECONDS
		dir=$(mktemp -d)
		echo "build-backends: building $name from $what ..."
		(
			cd "$dir"
			"$@"
		)
		# Through a temporary name in the cache: a binary is either whole
		# there or absent, even if this script is killed (the cache check
		# above trusts any executable file).
		mv "$dir/out" "$out.tmp"
		mv "$out.tmp" "$out"
		rm -rf "$dir"
		echo "build-backends: built $out in $((SECONDS - start))s"
	fi
	ln -sf "$name-$version" "$bin/$name"
}

# build MODULE VERSION PKG NAME [TAGS]: build PKG of MODULE@VERSION as
# $bin/NAME-VERSION, with the build tags TAGS.
build() {
	cached "$4" "$2" "$3@$2" get_and_build "$3" "$2" "${5:-}"
}

get_and_build() {
	local pkg=$1 version=$2 tags=$3
	go mod init bpfleet-backend-build >/dev/null 2>&1
	go get "$pkg@$version"
	go build -trimpath -tags "$tags" -ldflags "-s -w" -o out "$pkg"
}

# build_main NAME VERSION MODULE MODVERSION LDFLAGS MAIN_GO [GO_MOD_EDIT_ARGS...]:
# build a generated main package (MAIN_GO is its source) in a throw-away
# module requiring MODULE@MODVERSION as $bin/NAME-VERSION. GO_MOD_EDIT_ARGS
# (e.g. -replace flags) are applied to the module's go.mod before building.
build_main() {
	local name=$1 version=$2 module=$3 modversion=$4
	shift 2
	cached "$name" "$version" "$module@$modversion" main_and_build "$@"
}

main_and_build() {
	local module=$1 modversion=$2 ldflags=$3 main=$4
	shift 4
	go mod init bpfleet-backend-build >/dev/null 2>&1
	printf '%s\n' "$main" >main.go
	go mod edit -require="$module@$modversion" "$@"
	go mod tidy
	go build -trimpath -ldflags "-s -w $ldflags" -o out .
}

# kube-apiserver: k8s.io/kubernetes is not meant to be required as a module;
# its go.mod points every k8s.io/* staging module at ./staging/..., which a
# requiring module does not inherit. Replace each of those with its published
# release (v1.X.Y -> v0.X.Y), the list read from kubernetes' own go.mod so it
# follows the pinned version.
build_kube_apiserver() {
	local gomod staging replaces=()
	gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	staging=v0${KUBERNETES_VERSION#v1}
	local m
	for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod"); do
		replaces+=("-replace=$m=$m@$staging")
	done
	if ((${#replaces[@]} == 0)); then
		echo "build-backends: no ./staging replaces found in $gomod" >&2
		return 1
	fi
	build_main kube-apiserver "$KUBERNETES_VERSION" k8s.io/kubernetes "$KUBERNETES_VERSION" \
		"-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION" \
		'package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }' "${replaces[@]}"
}

# kube-node: kubelet, kube-controller-manager and kube-scheduler of the same
# k8s.io/kubernetes release as one multi-call binary (the first argument names
# the component: kube-node kubelet --config=...), so the three share one
# compile and one link; in the same module set-up as kube-apiserver, whose
# compiled packages the Go build cache then reuses. For test/node.
build_kube_node() {
	local gomod staging replaces=()
	gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	staging=v0${KUBERNETES_VERSION#v1}
	local m
	for m in $(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$gomod"); do
		replaces+=("-replace=$m=$m@$staging")
	done
	build_main kube-node "$KUBERNETES_VERSION" k8s.io/kubernetes "$KUBERNETES_VERSION" \
		"-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION" \
		'package main

import (
	"context"
	"fmt"
	"os"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	}
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: kube-node kubelet|kube-controller-manager|kube-scheduler [flags]")
		os.Exit(2)
	}
	cmd := commands[os.Args[1]]()
	cmd.SetArgs(os.Args[2:])
	os.Exit(cli.Run(cmd))
}' "${replaces[@]}"
}

# containerd: containerd and its runc shim (containerd-shim-runc-v2) of one
# release, in the directory $bin/containerd-VERSION; 2.x has the CRI
# RuntimeConfig call kubelet 1.37 asks for. runc itself is Debian's.
build_containerd() {
	cached containerd "$CONTAINERD_VERSION" "github.com/containerd/containerd/v2@$CONTAINERD_VERSION" containerd_build
}

containerd_build() {
	go mod init bpfleet-backend-build >/dev/null 2>&1
	go get "github.com/containerd/containerd/v2@$CONTAINERD_VERSION"
	mkdir out
	go build -trimpath -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
		-o out/ github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
}

# etcd: a single-member etcd for the tests, embedded through the server's
# embed package (the etcd command itself lives in another module whose
# dependency tree is larger). Flags: -data-dir, -client-url, -peer-url.
# It prints "etcd ready" once it serves and stops cleanly on SIGTERM/SIGINT.
build_etcd() {
	build_main etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "" \
		'package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "data directory (required)")
	clientURL := flag.String("client-url", "http://127.0.0.1:2379", "client URL to listen on and advertise")
	peerURL := flag.String("peer-url", "http://127.0.0.1:2380", "peer URL to listen on and advertise")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("etcd: -data-dir is required")
	}
	cu, err := url.Parse(*clientURL)
	if err != nil {
		log.Fatalf("etcd: -client-url: %v", err)
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		log.Fatalf("etcd: -peer-url: %v", err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: starting: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		log.Print("etcd ready")
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
	e.Close()
}'
}

# build_otelcol: build the Collector with ocb as $bin/otelcol-$OTELCOL_VERSION.
build_otelcol() {
	cached otelcol "$OTELCOL_VERSION" "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION" ocb_build "$OTELCOL_VERSION"
}

ocb_build() {
	local version=$1
	cat >builder.yaml <<-EOF
		dist:
		  module: bpfleet.example/otelcol
		  name: otelcol
		  description: OpenTelemetry Collector for bpfleet's end-to-end tests
		  version: ${version#v}
		  output_path: $PWD/dist
		receivers:
		  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver $version
		processors:
		  - gomod: go.opentelemetry.io/collector/processor/batchprocessor $version
		exporters:
		  - gomod: go.opentelemetry.io/collector/exporter/otlpexporter $version
		  - gomod: go.opentelemetry.io/collector/exporter/otlphttpexporter $version
		  - gomod: go.opentelemetry.io/collector/exporter/debugexporter $version
	EOF
	GOFLAGS= go run "go.opentelemetry.io/collector/cmd/builder@$version" --config builder.yaml
	mv dist/otelcol out
}

vm_targets=(victoria-metrics vmagent vmalert vmalert-tool vmauth)
targets=(prometheus promtool jaeger otelcol kube-apiserver etcd kube-node containerd "${vm_targets[@]}")
for arg in "$@"; do
	if [[ " ${targets[*]} " != *" $arg "* ]]; then
		echo "build-backends: unknown backend $arg (known: ${targets[*]})" >&2
		exit 2
	fi
done
for target in "${targets[@]}"; do
	if (($# > 0)) && [[ " $* " != *" $target "* ]]; then continue; fi
	case $target in
	prometheus) build github.com/prometheus/prometheus "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/prometheus prometheus "$PROMETHEUS_TAGS" ;;
	promtool) build github.com/prometheus/prometheus "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/promtool promtool "$PROMETHEUS_TAGS" ;;
	jaeger) build github.com/jaegertracing/jaeger "$JAEGER_VERSION" github.com/jaegertracing/jaeger/cmd/jaeger jaeger ;;
	otelcol) build_otelcol ;;
	kube-apiserver) build_kube_apiserver ;;
	etcd) build_etcd ;;
	kube-node) build_kube_node ;;
	containerd) build_containerd ;;
	victoria-metrics | vmagent | vmalert | vmalert-tool | vmauth) build "$VM_MODULE" "$VM_VERSION" "$VM_MODULE/app/$target" "$target" ;;
	esac
done
