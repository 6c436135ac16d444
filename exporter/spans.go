package exporter

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bpfleet/bpfleet/agent"
)

// SpanName is the name of every miss-episode span.
const SpanName = "bpf.recursion_miss"

// OpenSpanName is the span emitted when an episode is first seen open, so
// a long episode shows within one interval; the episode's final span links
// to it.
const OpenSpanName = "bpf.recursion_miss.open"

// missIntervalEvent is the span event of each interval with misses.
const missIntervalEvent = "bpf.miss.interval"

// The span events of an episode's sampled misses: its most frequent
// kernel stacks and turned-away tasks (agent.MaxEpisodeTop each).
const (
	missStackEvent = "bpf.miss.stack"
	missTaskEvent  = "bpf.miss.task"
)

type episodeKey struct {
	source     string
	prog, link uint32
	start      int64
}

func keyOf(ep *agent.Episode) episodeKey {
	return episodeKey{ep.Source, ep.ProgID, ep.LinkID, ep.Start.UnixNano()}
}

// spanState is what the span side remembers between snapshots: the owner
// attributes of each program (an episode that closes because its program
// unloaded still names its owner), the open spans to link to, and the
// budget.
type spanState struct {
	mu       sync.Mutex
	cur      map[uint32][]attribute.KeyValue
	prev     map[uint32][]attribute.KeyValue
	opened   map[episodeKey]trace.SpanContext
	window   time.Time
	used     int
	reported atomic.Int64
}

func newSpanState() spanState {
	return spanState{cur: map[uint32][]attribute.KeyValue{}, opened: map[episodeKey]trace.SpanContext{}}
}

// owners remembers the owner attributes of the programs of snap that have
// episodes, keeping the previous snapshot's for programs just gone.
func (s *spanState) owners(snap *agent.Snapshot) {
	want := make(map[uint32]bool, len(snap.Episodes))
	for i := range snap.Episodes {
		want[snap.Episodes[i].ProgID] = true
	}
	m := make(map[uint32][]attribute.KeyValue, len(want))
	for i := range snap.Programs {
		p := &snap.Programs[i].Program
		if !want[p.ID] {
			continue
		}
		k := workloadKeyOf(p)
		kv := make([]attribute.KeyValue, 0, 8)
		for _, a := range k.kvs(nil) {
			switch a.Key {
			case attrK8sNamespaceName, attrK8sWorkloadKind, attrK8sWorkloadName, attrProcessExecutableName:
				kv = append(kv, a)
			}
		}
		m[p.ID] = appendOwnerIDs(kv, p)
	}
	s.mu.Lock()
	s.prev, s.cur = s.cur, m
	s.mu.Unlock()
}

func (s *spanState) ownerKVs(id uint32) []attribute.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kv, ok := s.cur[id]; ok {
		return kv
	}
	return s.prev[id]
}

// take spends one span of the per-minute budget; false: over it.
func (s *spanState) take(budget int, now time.Time) bool {
	if budget <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.window) >= time.Minute {
		s.window, s.used = now, 0
	}
	if s.used >= budget {
		return false
	}
	s.used++
	return true
}

func (e *Exporter) episodeKVs(ep *agent.Episode) []attribute.KeyValue {
	kv := identityKVs(make([]attribute.KeyValue, 0, 28), ep.ProgID, ep.ProgName, ep.ProgTag, ep.ProgType, ep.AttachType, ep.AttachTarget, ep.Sleepable)
	if ep.LinkID != 0 {
		kv = append(kv, attribute.Int64(attrLinkID, int64(ep.LinkID)))
	}
	kind := ep.Kind
	if kind == "" {
		kind = agent.MissKindUnknown
	}
	kv = append(kv, attribute.String(attrEpisodeSource, ep.Source), attribute.String(attrMissKind, kind))
	return append(kv, e.spans.ownerKVs(ep.ProgID)...)
}

// episodeOpened emits the open span of an episode the first time a
// snapshot has it open: its misses so far, at the episode's start.
func (e *Exporter) episodeOpened(ctx context.Context, ep *agent.Episode) {
	k := keyOf(ep)
	e.spans.mu.Lock()
	_, done := e.spans.opened[k]
	e.spans.mu.Unlock()
	if done {
		return
	}
	if !e.spans.take(e.cfg.SpanBudget, e.now()) {
		e.spansDropped.Add(1)
		// Remember it anyway: one drop per episode, not one per scan.
		e.spans.mu.Lock()
		e.spans.opened[k] = trace.SpanContext{}
		e.spans.mu.Unlock()
		return
	}
	kv := append(e.episodeKVs(ep),
		attribute.Int64(attrEpisodeMisses, int64(ep.Misses)),
		attribute.Int64(attrEpisodeRuns, int64(ep.Runs)),
		attribute.Float64(attrEpisodePeakRate, ep.PeakRate),
	)
	kv = causeKVs(kv, ep)
	_, span := e.tracer.Start(ctx, OpenSpanName,
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(ep.Start),
		trace.WithAttributes(kv...),
	)
	end := ep.End
	if end.Before(ep.Start) {
		end = ep.Start
	}
	span.End(trace.WithTimestamp(end))
	e.spans.mu.Lock()
	e.spans.opened[k] = span.SpanContext()
	e.spans.mu.Unlock()
}

// episodeSpan emits one finished span for an episode. shutdown marks an
// episode the agent ended because it stopped.
func (e *Exporter) episodeSpan(ctx context.Context, ep *agent.Episode, shutdown bool) {
	k := keyOf(ep)
	e.spans.mu.Lock()
	openSC := e.spans.opened[k]
	delete(e.spans.opened, k)
	e.spans.mu.Unlock()
	if !e.spans.take(e.cfg.SpanBudget, e.now()) {
		e.spansDropped.Add(1)
		return
	}
	reason := ep.Reason
	if shutdown {
		reason = "shutdown"
	}
	if reason == "" {
		reason = "quiet"
	}
	kv := append(e.episodeKVs(ep),
		attribute.Int64(attrEpisodeMisses, int64(ep.Misses)),
		attribute.Int64(attrEpisodeRuns, int64(ep.Runs)),
		attribute.Float64(attrEpisodeMissRatio, ep.MissRatio()),
		attribute.Float64(attrEpisodePeakRate, ep.PeakRate),
		attribute.Int(attrEpisodeIntervals, len(ep.Intervals)+ep.Truncated),
		attribute.String(attrEpisodeEndedBy, reason),
	)
	if ep.Truncated > 0 {
		kv = append(kv, attribute.Int(attrEpisodeTruncated, ep.Truncated))
	}
	kv = causeKVs(kv, ep)
	opts := []trace.SpanStartOption{
		// Each episode is its own trace: it is not caused by a request.
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(ep.Start),
		trace.WithAttributes(kv...),
	}
	if openSC.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: openSC}))
	}
	_, span := e.tracer.Start(ctx, SpanName, opts...)
	for _, iv := range ep.Intervals {
		span.AddEvent(missIntervalEvent, trace.WithTimestamp(iv.Time), trace.WithAttributes(
			attribute.Int64(attrEpisodeMisses, int64(iv.Misses)),
			attribute.Int64(attrEpisodeRuns, int64(iv.Runs)),
			attribute.Float64(attrEpisodeRate, iv.Rate),
		))
	}
	end := ep.End
	if end.Before(ep.Start) {
		end = ep.Start
	}
	missEvents(span, ep, end)
	span.End(trace.WithTimestamp(end))
}

// episodeCauses are a recursion-miss episode's misses by cause, adding up
// to its misses (all unexplained where the watcher explained none); ok is
// false for a link episode, whose misses have no cause.
func episodeCauses(ep *agent.Episode) (agent.MissCauses, bool) {
	if ep.Source != agent.SourceRecursionMisses {
		return agent.MissCauses{}, false
	}
	return agent.FitCauses(ep.Causes, ep.Misses), true
}

// causeKVs adds an episode's count of each cause (bpf.miss.cause.<cause>,
// every cause, zeros too: a query need not know which were seen) and its
// dominant cause (bpf.miss.cause: the explained cause with the most
// misses, unexplained where none was explained).
func causeKVs(kv []attribute.KeyValue, ep *agent.Episode) []attribute.KeyValue {
	c, ok := episodeCauses(ep)
	if !ok {
		return kv
	}
	dominant, most := agent.CauseUnexplained, uint64(0)
	for _, cause := range agent.Causes {
		n := c.Get(cause)
		kv = append(kv, attribute.Int64(attrMissCause+"."+cause, int64(n)))
		if cause != agent.CauseUnexplained && n > most {
			dominant, most = cause, n
		}
	}
	kv = append(kv, attribute.String(attrMissCause, dominant))
	for _, ctx := range []string{agent.ContextTask, agent.ContextSoftirq, agent.ContextHardirq, agent.ContextNMI} {
		if n := ep.Contexts[ctx]; n > 0 {
			kv = append(kv, attribute.Int64(attrMissContext+"."+ctx, int64(n)))
		}
	}
	return kv
}

// missEvents adds an episode's top stacks and tasks as span events, at
// the episode's end (the samples are counted over the whole episode).
func missEvents(span trace.Span, ep *agent.Episode, at time.Time) {
	for _, st := range ep.Stacks {
		span.AddEvent(missStackEvent, trace.WithTimestamp(at), trace.WithAttributes(
			attribute.String(attrMissCause, st.Cause),
			attribute.String(attrMissContext, st.Context),
			attribute.Int64(attrEpisodeMisses, int64(st.Misses)),
			attribute.String(attrMissStack, strings.Join(st.Stack, "\n")),
		))
	}
	for _, t := range ep.Tasks {
		kv := ownerKVs([]attribute.KeyValue{attribute.Int64(attrEpisodeMisses, int64(t.Misses))},
			t.PID, t.Comm, "", t.ContainerID, t.PodName, t.PodNamespace)
		span.AddEvent(missTaskEvent, trace.WithTimestamp(at), trace.WithAttributes(kv...))
	}
}
