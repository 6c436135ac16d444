package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/bpfleet/bpfleet/agent"
)

// BenchmarkSnapshot200 serves /v1/snapshot and a filtered /v1/programs for
// a node with 200 programs (the fleet sizing in ARCHITECTURE.md, "Sizing").
func BenchmarkSnapshot200(b *testing.B) {
	snap := fixture()
	base := snap.Programs[2]
	snap.Programs = nil
	for i := range 200 {
		p := base
		p.ID = uint32(1000 + i)
		p.Name = fmt.Sprintf("prog_%d", i)
		snap.Programs = append(snap.Programs, p)
	}
	h := newTestServer(b, Options{Snapshot: func() *agent.Snapshot { return snap }}).Handler()
	for _, target := range []string{"/v1/snapshot", "/v1/programs?sort=cpu&limit=10"} {
		b.Run(target, func(b *testing.B) {
			req := localRequest(http.MethodGet, target, nil)
			var n int
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				n = w.Body.Len()
			}
			b.ReportMetric(float64(n), "bytes/resp")
		})
	}
}
