package otlp

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/exporter/internal/faultaddr"
	"github.com/bpfleet/bpfleet/internal/config"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// With the backend hanging or down, every span is counted: those the full
// queue refused at once, the rest when their batch failed or at shutdown.
// Nothing is delivered, so all of them.
func TestSpanQueueCountsEveryLoss(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stuck bool
	}{{"hanging", true}, {"down", false}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := faultaddr.Dead(t)
			if tc.stuck {
				var closeAll func()
				addr, closeAll = faultaddr.Stuck(t)
				defer closeAll()
			}
			exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(addr), otlptracehttp.WithInsecure(),
				otlptracehttp.WithTimeout(100*time.Millisecond), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
			if err != nil {
				t.Fatal(err)
			}
			var dropped atomic.Int64
			var failures atomic.Int64
			q := NewSpanQueue(exp, config.SpanQueue{Size: 8, Batch: 4, Delay: 10 * time.Millisecond, Timeout: 200 * time.Millisecond},
				&dropped, func(error) { failures.Add(1) })
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
			const n = 100
			for i := 0; i < n; i++ {
				_, sp := tp.Tracer("test").Start(context.Background(), "episode")
				sp.End()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = tp.Shutdown(ctx)
			if got := dropped.Load(); got != n {
				t.Errorf("dropped %d of %d spans with the backend %s, none delivered: want all counted", got, n, tc.name)
			}
			if failures.Load() == 0 {
				t.Error("no failed export counted")
			}
			t.Logf("backend %s: %d spans counted dropped, %d failed exports", tc.name, dropped.Load(), failures.Load())
		})
	}
}

func TestSpanQueueDefaults(t *testing.T) {
	for _, tc := range []struct{ in, want config.SpanQueue }{
		{config.SpanQueue{}, config.SpanQueue{Size: 2048, Batch: 512, Delay: 5 * time.Second}},
		{config.SpanQueue{Size: 100, Batch: 512}, config.SpanQueue{Size: 100, Batch: 100, Delay: 5 * time.Second}},
		{config.SpanQueue{Size: 8, Batch: 4, Delay: time.Millisecond, Timeout: time.Second}, config.SpanQueue{Size: 8, Batch: 4, Delay: time.Millisecond, Timeout: time.Second}},
	} {
		if got := SpanQueueDefaults(tc.in); got != tc.want {
			t.Errorf("SpanQueueDefaults(%+v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
