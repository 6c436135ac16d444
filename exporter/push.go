package exporter

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// pusher exports the metrics itself, right after the Update that made
// them, when Config.ScanInterval says Updates come at a steady pace (the
// agent's scans). The SDK's periodic reader ran on a ticker of its own:
// a second timer in an otherwise idle process, an export of whatever view
// the tick found (the previous scan's when it fired during a scan), and
// its collection buffers handed to a sync.Pool that every GC empties.
// Here the agent wakes once per interval: scan, Update, export — one
// goroutine handoff, no timer of the exporter's own — and each
// destination keeps its ResourceMetrics and its producer's data points
// from one export to the next.
type pusher struct {
	// every is the export interval; an Update exports when at least
	// every - slack passed since the last one that did, slack being half
	// a scan interval: scans end a few ms apart, never half an interval.
	every, slack time.Duration
	// timeout bounds one collection and export of every destination
	// (OTEL_METRIC_EXPORT_TIMEOUT, as the periodic reader has it).
	timeout time.Duration

	dueMu sync.Mutex
	next  time.Time // zero: the first Update exports

	kick     chan struct{} // one pending export at most
	stopOnce sync.Once
	done     chan struct{} // closed by stop
	exited   chan struct{} // closed when run returns

	// mu serialises collections and exports (run, ForceFlush, Shutdown):
	// each destination reuses its buffers.
	mu    sync.Mutex
	dests []*pushDest
}

// pushDest is one pushed destination: a manual reader registered with
// the meter provider, its exporter, and the collection it reuses.
type pushDest struct {
	r   *sdkmetric.ManualReader
	exp sdkmetric.Exporter
	rm  metricdata.ResourceMetrics
}

func newPusher(every, timeout, scanInterval time.Duration) *pusher {
	return &pusher{
		every:   every,
		slack:   scanInterval / 2,
		timeout: timeout,
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
}

// exportTimeout is OTEL_METRIC_EXPORT_TIMEOUT as internal/config
// resolved it, else the SDK's default of 30 s.
func (c *Config) exportTimeout() time.Duration {
	if c.OTel.MetricExportTimeout > 0 {
		return c.OTel.MetricExportTimeout
	}
	return 30 * time.Second
}

// add makes a destination for exp: a manual reader with the producers'
// metrics, exporting as exp asks (temporality, aggregation).
func (p *pusher) add(exp sdkmetric.Exporter, producers ...sdkmetric.Producer) sdkmetric.Reader {
	opts := []sdkmetric.ManualReaderOption{sdkmetric.WithTemporalitySelector(exp.Temporality), sdkmetric.WithAggregationSelector(exp.Aggregation)}
	for _, pr := range producers {
		opts = append(opts, sdkmetric.WithProducer(pr))
	}
	d := &pushDest{r: sdkmetric.NewManualReader(opts...), exp: exp}
	p.dests = append(p.dests, d)
	return d.r
}

// start runs the export goroutine.
func (p *pusher) start() { go p.run() }

func (p *pusher) run() {
	defer close(p.exited)
	for {
		select {
		case <-p.done:
			return
		case <-p.kick:
			ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
			if err := p.export(ctx, false); err != nil {
				otel.Handle(err)
			}
			cancel()
		}
	}
}

// updated is called after every Update (and failed scan): it starts an
// export when one is due, without waiting for it.
func (p *pusher) updated(now time.Time) {
	p.dueMu.Lock()
	due := !now.Before(p.next)
	if due {
		p.next = now.Add(p.every - p.slack)
	}
	p.dueMu.Unlock()
	if due {
		select {
		case p.kick <- struct{}{}:
		default: // one is pending: it will read the latest view
		}
	}
}

// export collects and exports every destination now; with settle it also
// waits for the destinations' answers (ForceFlush: the wire exporter reads
// an answer only at its next request otherwise).
func (p *pusher) export(ctx context.Context, settle bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, d := range p.dests {
		// As the periodic reader does: what failed to collect is not
		// exported.
		if err := d.r.Collect(ctx, &d.rm); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, d.exp.Export(ctx, &d.rm))
		if settle {
			errs = append(errs, d.exp.ForceFlush(ctx))
		}
	}
	return errors.Join(errs...)
}

// stop ends the export goroutine (waiting for an export in flight, up to
// ctx), exports one last time and shuts the exporters down.
// A second stop does nothing.
func (p *pusher) stop(ctx context.Context) error {
	first := false
	p.stopOnce.Do(func() { first = true; close(p.done) })
	if !first {
		return nil
	}
	select {
	case <-p.exited:
	case <-ctx.Done():
		return ctx.Err()
	}
	errs := []error{p.export(ctx, true)}
	for _, d := range p.dests {
		errs = append(errs, d.exp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// exportInterval is Config.Interval, else OTEL_METRIC_EXPORT_INTERVAL as
// internal/config resolved it, else the SDK's default of 60 s.
func (c *Config) exportInterval() time.Duration {
	switch {
	case c.Interval > 0:
		return c.Interval
	case c.OTel.MetricExportInterval > 0:
		return c.OTel.MetricExportInterval
	}
	return time.Minute
}
