// Package rules holds the unit tests of bpfleet's Prometheus alert rules
// (charts/bpfleet/files/bpfleet.rules.yaml): promtool check rules and
// promtool test rules on bpfleet.rules_test.yaml.
package rules
