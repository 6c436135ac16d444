// Package archcheck holds the test that keeps the tree's shape: no product
// Go file over 600 lines, and no import that ARCHITECTURE.md's "Import rules"
// forbid. It has no code of its own; `make test` runs it with the host tests.
package archcheck
