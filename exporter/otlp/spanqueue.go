package otlp

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/bpfleet/bpfleet/internal/config"
)

// SpanQueueDefaults fills what a hand-made Config left zero with the spec's
// OTEL_BSP_* defaults (internal/config resolves the agent's).
func SpanQueueDefaults(q config.SpanQueue) config.SpanQueue {
	if q.Size <= 0 {
		q.Size = config.DefaultSpanQueueSize
	}
	if q.Batch <= 0 {
		q.Batch = config.DefaultSpanQueueBatch
	}
	q.Batch = min(q.Batch, q.Size)
	if q.Delay <= 0 {
		q.Delay = config.DefaultSpanQueueDelay
	}
	return q
}

// SpanQueue is the span processor in front of the OTLP span exporter. It
// does what the SDK's batch span processor does (a bounded queue, batches
// sent by one goroutine, never blocking the caller) except that nothing is
// lost uncounted: a span that finds the queue full, and every span of a
// batch the exporter could not send (after its own retries), is added to
// dropped. The SDK's processor drops both silently, so during a long
// backend outage every episode past its 2,048-span queue vanished.
type SpanQueue struct {
	exp     sdktrace.SpanExporter
	cfg     config.SpanQueue
	dropped *atomic.Int64
	failed  func(err error) // one failed export, for the error count and log

	q       chan sdktrace.ReadOnlySpan
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}

	// mu orders OnEnd against Shutdown: once closed is set no span enters
	// the queue, so the last drain sees every span queued.
	mu     sync.RWMutex
	closed bool
}

// NewSpanQueue starts the queue's export goroutine, sending to exp.
func NewSpanQueue(exp sdktrace.SpanExporter, cfg config.SpanQueue, dropped *atomic.Int64, failed func(error)) *SpanQueue {
	cfg = SpanQueueDefaults(cfg)
	s := &SpanQueue{
		exp: exp, cfg: cfg, dropped: dropped, failed: failed,
		q:       make(chan sdktrace.ReadOnlySpan, cfg.Size),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go s.run()
	return s
}

func (s *SpanQueue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues the span, or counts it dropped when the queue is full or
// the processor is shut down.
func (s *SpanQueue) OnEnd(sp sdktrace.ReadOnlySpan) {
	if !sp.SpanContext().IsSampled() {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.dropped.Add(1)
		return
	}
	select {
	case s.q <- sp:
	default:
		s.dropped.Add(1)
	}
}

// run collects batches and exports them: when a batch is full, when Delay
// has passed since the last export, on a flush and at shutdown (what is
// queued then is exported once more, then the exporter shut down).
func (s *SpanQueue) run() {
	defer close(s.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, s.cfg.Batch)
	tick := time.NewTicker(s.cfg.Delay)
	defer tick.Stop()
	send := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.Background(), func() {}
		if s.cfg.Timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		}
		if err := s.exp.ExportSpans(ctx, batch); err != nil {
			s.dropped.Add(int64(len(batch)))
			s.failed(err)
		}
		cancel()
		clear(batch) // the spans are garbage now, not held by the array
		batch = batch[:0]
	}
	// drain takes what is queued now into batches and sends them.
	drain := func() {
		for {
			select {
			case sp := <-s.q:
				if batch = append(batch, sp); len(batch) == s.cfg.Batch {
					send()
				}
			default:
				send()
				return
			}
		}
	}
	for {
		select {
		case sp := <-s.q:
			if batch = append(batch, sp); len(batch) == s.cfg.Batch {
				send()
			}
		case <-tick.C:
			send()
		case ack := <-s.flushes:
			drain()
			close(ack)
		case <-s.stop:
			drain()
			return
		}
	}
}

// ForceFlush exports what is queued now and waits for it, or for ctx.
func (s *SpanQueue) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case s.flushes <- ack:
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued, then shuts the exporter down. Spans
// ended after it are counted dropped.
func (s *SpanQueue) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.exp.Shutdown(ctx)
}
