package config

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTLSFilesLoad holds Load to a real TLS server: the CA file it names
// is the one trusted, a file without a PEM certificate is refused, and no
// file gives no configuration.
func TestTLSFilesLoad(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if c, err := (TLSFiles{}).Load(); c != nil || err != nil {
		t.Errorf("no files: %v, %v; want nil, nil", c, err)
	}
	c, err := TLSFiles{Certificate: ca}.Load()
	if err != nil {
		t.Fatalf("loading %s: %v", ca, err)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: c}}
	resp, err := cl.Get(srv.URL)
	if err != nil {
		t.Fatalf("a client trusting the loaded CA: %v", err)
	}
	resp.Body.Close()
	if _, err := (TLSFiles{Certificate: empty}).Load(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file without a certificate: %v, want no PEM certificate", err)
	}
	if _, err := (TLSFiles{ClientCertificate: ca}).Load(); err == nil || !strings.Contains(err.Error(), "client certificate and key") {
		t.Errorf("a client certificate without its key: %v, want an error about the pair", err)
	}
}
