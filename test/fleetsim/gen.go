package fleetsim

// Recording this host's kernel into testdata (root; see README.md for the
// kernel matrix's guests):
//go:generate env BPFLEET_RECORD_DIR=testdata go test -count=1 -run ^TestRecord$ .
