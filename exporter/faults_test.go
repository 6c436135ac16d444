package exporter

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/exporter/internal/faultaddr"
	"github.com/bpfleet/bpfleet/internal/config"
)

// bigSnapshot is a node with n programs and a few closed episodes.
func bigSnapshot(seq uint64, n int) *agent.Snapshot {
	progs := make([]agent.ProgramStat, n)
	for i := range progs {
		progs[i] = prog(uint32(i+1), uint64(i)*1000+seq, u64(seq))
		progs[i].Delta = agent.Rates{Runs: 10, RunTimeNs: 1000}
	}
	s := snapshot(seq, progs...)
	s.AttachTypes = []agent.AttachTypeStat{{AttachType: "tp_btf", Programs: n, Delta: agent.Rates{Runs: uint64(n) * 10}}}
	t := time.Unix(3000+int64(seq), 0)
	for i := 0; i < 5; i++ {
		s.Episodes = append(s.Episodes, agent.Episode{Source: agent.SourceRecursionMisses, ProgID: uint32(i + 1), Start: t, End: t,
			Misses: 1, Intervals: []agent.EpisodeInterval{{Time: t, Misses: 1}}})
	}
	return s
}

// With the backend down or hanging, Update must not block, memory must stay
// bounded, errors are counted and said once per LogErrors, and after
// Shutdown no goroutine is left behind.
func TestBackendFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto config.Protocol
		stuck bool
		// scan: exports follow Updates (Config.ScanInterval, as the agent
		// runs it) instead of the SDK's periodic reader.
		scan time.Duration
	}{
		{"http down", config.ProtocolHTTP, false, 0},
		{"grpc down", config.ProtocolGRPC, false, 0},
		{"http hanging", config.ProtocolHTTP, true, 0},
		{"grpc hanging", config.ProtocolGRPC, true, 0},
		{"http hanging, exports after updates", config.ProtocolHTTP, true, 5 * time.Millisecond},
		{"grpc down, exports after updates", config.ProtocolGRPC, false, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GC()
			base := runtime.NumGoroutine()
			addr := faultaddr.Dead(t)
			closeStuck := func() {}
			if tc.stuck {
				addr, closeStuck = faultaddr.Stuck(t)
			}
			// Short timeouts so a hanging backend costs the test little,
			// resolved by internal/config as the agent's are.
			o, err := config.ResolveOTel(config.MapEnv(map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "200", "OTEL_METRIC_EXPORT_TIMEOUT": "300"}), "http://"+addr, string(tc.proto))
			if err != nil {
				t.Fatal(err)
			}
			o.SpanQueue = config.SpanQueue{Delay: 50 * time.Millisecond, Timeout: 300 * time.Millisecond}
			var logBuf bytes.Buffer
			e, err := New(context.Background(), Config{
				Level: LevelProgram, Interval: 50 * time.Millisecond, ScanInterval: tc.scan, OTel: o,
				Log: slog.New(slog.NewTextHandler(&logBuf, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}

			otel.SetErrorHandler(otel.ErrorHandlerFunc(e.HandleError))
			defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))

			var heapMid uint64
			var updates, slow int
			deadline := time.Now().Add(2 * time.Second)
			for seq := uint64(1); time.Now().Before(deadline); seq++ {
				s := bigSnapshot(seq, 200)
				start := time.Now()
				e.Update(context.Background(), s)
				updates++
				if time.Since(start) > 100*time.Millisecond {
					slow++
				}
				if seq == 20 {
					heapMid = heapInUse()
				}
				time.Sleep(5 * time.Millisecond)
			}
			heapEnd := heapInUse()
			// An export takes up to 300ms here (the timeout): if Update waited
			// for it, most updates would be slow. A loaded CI machine may
			// stall the odd one.
			if slow*20 > updates {
				t.Errorf("%d of %d updates took over 100ms with the backend %s: Update waits for export", slow, updates, tc.name)
			}
			if heapEnd > heapMid+32<<20 {
				t.Errorf("heap grew from %d to %d bytes with the backend down: unbounded", heapMid, heapEnd)
			}
			m, tr := e.ExportErrors()
			if m == 0 || tr == 0 {
				t.Errorf("export errors counted: metrics %d, traces %d; want both > 0", m, tr)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			start := time.Now()
			_ = e.Shutdown(ctx) // fails: the backend is down
			if d := time.Since(start); d > 3500*time.Millisecond {
				t.Errorf("Shutdown took %v", d)
			}
			// After Shutdown no export can add an error between the two
			// calls (while exporting, one could, and the second line would
			// be right): one line for everything counted, then none.
			e.LogErrors()
			e.LogErrors()
			if n := strings.Count(logBuf.String(), "telemetry errors since last interval"); n != 1 {
				t.Errorf("%d error lines for one interval, want 1:\n%s", n, logBuf.String())
			}
			closeStuck()
			if err := waitGoroutines(base, 5*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func waitGoroutines(base int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := runtime.NumGoroutine()
		if n <= base+1 {
			return nil
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("%d goroutines after shutdown, %d before: leak\n%s", n, base, buf)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
