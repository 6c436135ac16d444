package otlp

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/bpfleet/bpfleet/internal/config"
)

// LoadTLS loads the PEM files config named (and checked readable at
// start): nil when none is named.
func LoadTLS(f config.TLSFiles) (*tls.Config, error) {
	if !f.Set() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.Certificate != "" {
		pem, err := os.ReadFile(f.Certificate)
		if err != nil {
			return nil, fmt.Errorf("OTLP certificate: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("OTLP certificate %s: no PEM certificate in it", f.Certificate)
		}
	}
	if f.ClientCertificate != "" || f.ClientKey != "" {
		pair, err := tls.LoadX509KeyPair(f.ClientCertificate, f.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("OTLP client certificate and key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
