package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Load builds a client TLS configuration from the PEM files (checked
// readable when the configuration was resolved): Certificate is the CA
// bundle that signed the server's certificate, ClientCertificate and
// ClientKey a client's pair. nil when no file is named.
func (f TLSFiles) Load() (*tls.Config, error) {
	if !f.Set() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.Certificate != "" {
		pem, err := os.ReadFile(f.Certificate)
		if err != nil {
			return nil, fmt.Errorf("reading the CA certificate: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA certificate %s: no PEM certificate in it", f.Certificate)
		}
	}
	if f.ClientCertificate != "" || f.ClientKey != "" {
		pair, err := tls.LoadX509KeyPair(f.ClientCertificate, f.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate and key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
