// Package e2e runs the built `bpfleet agent` against real Prometheus and
// Jaeger started on loopback, while the recursion canary produces genuine
// misses, and checks what the backends' own APIs return against the
// kernel's counters. Test-only: it wires the binary, the canary probe and
// the backends, which the exporter package itself never imports.
package e2e
