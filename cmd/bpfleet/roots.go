//go:build !lean

package main

// Mozilla's root certificates, used only where the system has none (as in
// make image's image, which holds the two binaries and nothing else), so an
// OTLP endpoint over HTTPS with a public certificate is verified there too.
// The agent's API server connection uses the ServiceAccount's CA instead.
import _ "golang.org/x/crypto/x509roots/fallback"
