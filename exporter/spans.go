package exporter

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bpfleet/bpfleet/agent"
)

// SpanName is the name of every miss-episode span.
const SpanName = "bpf.recursion_miss"

// episodeSpan emits one finished span for an episode. shutdown marks an
// episode the agent ended because it stopped.
func (e *Exporter) episodeSpan(ctx context.Context, ep *agent.Episode, shutdown bool) {
	reason := ep.Reason
	if shutdown {
		reason = "shutdown"
	}
	if reason == "" {
		reason = "quiet"
	}
	kv := identityKVs(make([]attribute.KeyValue, 0, 20), ep.ProgID, ep.ProgName, ep.ProgTag, ep.ProgType, ep.AttachType, ep.AttachTarget, ep.Sleepable)
	if ep.LinkID != 0 {
		kv = append(kv, attribute.Int64("bpf.link.id", int64(ep.LinkID)))
	}
	kind := ep.Kind
	if kind == "" {
		kind = agent.MissKindUnknown
	}
	kv = append(kv,
		attribute.String("bpf.episode.source", ep.Source),
		attribute.String("bpf.miss.kind", kind),
		attribute.Int64("bpf.episode.misses", int64(ep.Misses)),
		attribute.Int64("bpf.episode.runs", int64(ep.Runs)),
		attribute.Float64("bpf.episode.miss_ratio", ep.MissRatio()),
		attribute.Float64("bpf.episode.peak_rate", ep.PeakRate),
		attribute.Int("bpf.episode.intervals", len(ep.Intervals)+ep.Truncated),
		attribute.String("bpf.episode.ended_by", reason),
	)
	if ep.Truncated > 0 {
		kv = append(kv, attribute.Int("bpf.episode.truncated", ep.Truncated))
	}
	// Each episode is its own trace: it is not caused by a request.
	_, span := e.tracer.Start(ctx, SpanName,
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(ep.Start),
		trace.WithAttributes(kv...),
	)
	for _, iv := range ep.Intervals {
		span.AddEvent("bpf.miss.interval", trace.WithTimestamp(iv.Time), trace.WithAttributes(
			attribute.Int64("bpf.episode.misses", int64(iv.Misses)),
			attribute.Int64("bpf.episode.runs", int64(iv.Runs)),
			attribute.Float64("bpf.episode.rate", iv.Rate),
		))
	}
	end := ep.End
	if end.Before(ep.Start) {
		end = ep.Start
	}
	span.End(trace.WithTimestamp(end))
}
