package exporter

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bpfleet/bpfleet/agent"
)

// BenchmarkUpdate is the exporter's per-scan work (Update: the view of a
// snapshot) at 1,000 programs with distinct names. In "busy" every
// program's counters grew since the previous scan; in "idle" 50 did and
// the other 950 keep their snapshot entries, as the agent hands out an
// unchanged program's entry again.
func BenchmarkUpdate(b *testing.B) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		for _, busy := range []bool{true, false} {
			name := level.String() + "/idle"
			if busy {
				name = level.String() + "/busy"
			}
			b.Run(name, func(b *testing.B) { benchUpdate(b, level, busy, "") })
		}
	}
}

// BenchmarkCollectSampled is one busy scan's export work with
// --stats=sampled: Update, then one collection of every metric (the
// producer's program and workload counters and the instruments), as a
// reader does before each export.
func BenchmarkCollectSampled(b *testing.B) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		b.Run(level.String(), func(b *testing.B) { benchUpdate(b, level, true, agent.StatsSampled) })
	}
}

// benchUpdate runs Updates at level; with a stats mode, each is followed
// by a collection.
func benchUpdate(b *testing.B, level Level, busy bool, mode agent.StatsMode) {
	var e *Exporter
	cfg := Config{Level: level, MaxPrograms: 1000}
	var r *sdkmetric.ManualReader
	if mode != "" {
		var opts []sdkmetric.ManualReaderOption
		for _, p := range Producers(&e) {
			opts = append(opts, sdkmetric.WithProducer(p))
		}
		r = sdkmetric.NewManualReader(opts...)
		cfg.Readers = []sdkmetric.Reader{r}
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	now := time.Now()
	ps := make([]agent.ProgramStat, 1000)
	for i := range ps {
		ps[i] = podProg(uint32(i+1), fmt.Sprintf("flt_%04d", i), "w", "w-1", 100, now.Add(-time.Hour), 10, 0)
	}
	ctx := context.Background()
	snap := snapshot(1, ps...)
	snap.Stats.Mode = mode
	for n := 0; b.Loop(); n++ {
		for i, p := range snap.Programs {
			if busy || i%20 == n%20 {
				c := *p
				c.RunCount += 7
				c.RunTimeNs += 700
				snap.Programs[i] = &c
			}
		}
		snap.Seq, snap.Time = uint64(n+2), snap.Time.Add(10*time.Second)
		e.Update(ctx, snap)
		if r != nil {
			var rm metricdata.ResourceMetrics
			if err := r.Collect(ctx, &rm); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkUpdateMaps is Update's map and memory work (memory.go) at
// 1,000 idle programs with distinct names, each with a hash map of its
// own and one of 100 maps shared by 10 programs: 1,100 maps. steady: no
// map moves, each scan's entries the last one's (as the agent hands them
// out); moving: 100 hash maps a scan change their count (new entries).
func BenchmarkUpdateMaps(b *testing.B) {
	for _, level := range []Level{LevelWorkload, LevelProgram} {
		for _, moving := range []int{0, 100} {
			name := level.String() + "/steady"
			if moving > 0 {
				name = level.String() + "/moving"
			}
			b.Run(name, func(b *testing.B) {
				e, err := New(context.Background(), Config{Level: level, MaxPrograms: 1000})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Shutdown(context.Background())
				now := time.Now()
				ps := make([]agent.ProgramStat, 1000)
				maps := make([]agent.Map, 0, 1100)
				for i := range ps {
					id := uint32(i + 1)
					ps[i] = podProg(id, fmt.Sprintf("flt_%04d", i), "w", "w-1", 100, now.Add(-time.Hour), 10, 0)
					ps[i].MapIDs = []uint32{id, 10_000 + id%100}
					maps = append(maps, bpfMap(id, fmt.Sprintf("own_%04d", i), "hash", 4096, 100, i%100))
				}
				for i := range 100 {
					maps = append(maps, bpfMap(uint32(10_000+i), fmt.Sprintf("shared_%02d", i), "array", 512, 4, -1))
				}
				snap := withMaps(snapshot(1, ps...), maps...)
				for n := 0; b.Loop(); n++ {
					snap.Seq, snap.Time = uint64(n+2), snap.Time.Add(10*time.Second)
					if moving > 0 {
						// A new slice, as the agent makes each scan, with
						// new entries for the maps that moved.
						snap.Maps = slices.Clone(snap.Maps)
						for k := range moving {
							i := (n*moving + k) % 1000
							m := *snap.Maps[i]
							c := *m.Entries + 1
							f := float64(c%100) / float64(m.MaxEntries)
							c %= 100
							m.Entries, m.Fullness = &c, &f
							snap.Maps[i] = &m
						}
					}
					e.Update(context.Background(), snap)
				}
			})
		}
	}
}
