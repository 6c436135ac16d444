// Package initquiet silences the standard logger while bpfleet's packages
// initialise. go.opentelemetry.io/auto/sdk reads the OTEL_*_LIMIT variables
// into a package variable and, for a malformed one, warns through slog
// before main runs; internal/config checks the same variables and refuses
// them with one line, so the SDK's warning would only be a second, earlier
// line for the same mistake.
//
// Go initialises packages in import-path order as soon as their imports
// are (the spec's rule since Go 1.21): importing only the standard library
// and sorting before go.opentelemetry.io, this package runs first. main
// calls Restore before it does anything else.
package initquiet

import (
	"io"
	"log"
)

var saved io.Writer

func init() {
	saved = log.Writer()
	log.SetOutput(io.Discard)
}

// Restore gives the standard logger its output back.
func Restore() { log.SetOutput(saved) }
