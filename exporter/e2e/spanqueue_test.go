package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/test/backends"
)

// spanQueueOTel sends spans only, to endpoint over OTLP/HTTP, through a
// queue of 4 spans that exports only when full (or at shutdown).
func spanQueueOTel(t *testing.T, endpoint string) config.OTel {
	t.Helper()
	o, err := config.ResolveOTel(config.MapEnv(map[string]string{"OTEL_METRICS_EXPORTER": "none", "OTEL_TRACES_EXPORTER": "otlp"}), endpoint, string(config.ProtocolHTTP))
	if err != nil {
		t.Fatal(err)
	}
	o.SpanQueue = config.SpanQueue{Size: 4, Batch: 4, Delay: time.Hour, Timeout: 10 * time.Second}
	return o
}

// Every miss-episode span is either in Jaeger or counted in
// bpf.agent.spans.dropped: a burst of episodes larger than the export
// queue (4 spans here) into a real Jaeger. How many the queue refused
// depends on how fast the export goroutine empties it; the sum does not.
func TestSpansDeliveredOrCounted(t *testing.T) {
	jg := backends.StartJaeger(t)
	ctx := context.Background()
	e, err := exporter.New(ctx, exporter.Config{
		Level:    exporter.LevelProgram,
		OTel:     spanQueueOTel(t, "http://"+jg.OTLPHTTP),
		NodeName: "spanqueue-node",
	})
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("burst%d", time.Now().UnixNano()%1e6)
	const n = 40
	now := time.Now()
	snap := &agent.Snapshot{Seq: 1, Time: now, Stats: agent.StatsState{Enabled: true, HeldByAgent: true}}
	for i := 0; i < n; i++ {
		id := uint32(900000 + i)
		snap.Programs = append(snap.Programs, &agent.ProgramStat{Program: agent.Program{ID: id, Name: name, Type: "tracing", AttachType: "tp_btf"}})
		snap.Episodes = append(snap.Episodes, agent.Episode{Source: agent.SourceRecursionMisses, ProgID: id, ProgName: name,
			ProgType: "tracing", AttachType: "tp_btf", Start: now.Add(-time.Second), End: now, Misses: 1, Reason: "quiet",
			Intervals: []agent.EpisodeInterval{{Time: now, Misses: 1}}})
	}
	e.Update(ctx, snap)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := e.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	dropped := e.SpansDropped()
	var delivered int
	err = backends.Eventually(30*time.Second, func() error {
		spans, err := jg.Spans(ctx, "bpfleet-agent", map[string]string{"bpf.program.name": name})
		if err != nil {
			return err
		}
		delivered = 0
		for _, s := range spans {
			if s.OperationName == "bpf.recursion_miss" {
				delivered++
			}
		}
		if int64(delivered)+dropped != n {
			return fmt.Errorf("%d episode spans in Jaeger and %d counted dropped, of %d", delivered, dropped, n)
		}
		return nil
	})
	t.Logf("%d episodes: %d spans in Jaeger, %d counted in bpf.agent.spans.dropped (queue of 4)", n, delivered, dropped)
	if err != nil {
		t.Fatal(err)
	}
	if delivered < 4 {
		t.Errorf("only %d spans delivered: the queue holds 4", delivered)
	}
}
