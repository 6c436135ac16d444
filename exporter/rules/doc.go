// Package rules holds the unit tests of bpfleet's Prometheus alert rules
// (charts/bpfleet/files/bpfleet.rules.yaml): promtool check rules, promtool
// test rules on bpfleet.rules_test.yaml, a generated 1,000-node test, and
// TestRulesCasesCanFail, which breaks each rule in turn (its comparisons
// flipped, its exceptions dropped, never or always firing) and checks that
// every case of bpfleet.rules_test.yaml fails on some broken rule: a case
// that cannot fail (evaluated before its rule's for: could elapse, or
// checking an input rather than a rule) fails the test instead.
package rules
