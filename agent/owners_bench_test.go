package agent

import (
	"context"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/internal/scantest"
	"github.com/bpfleet/bpfleet/test/pods"
)

// cgroupFiller fills what kube.Pods without API access (a nil *Pods, the
// agent's filler on a node outside a cluster) fills: the container and pod
// ids an owner's cgroup path names.
type cgroupFiller struct{}

// Generation is kube.Pods': a nil *Pods' answers never change.
func (cgroupFiller) Generation() uint64 { return 0 }

func (cgroupFiller) Fill(o *Owner) { o.FillFromCgroup() }

// BenchmarkOwnerRefresh is the agent's owner refresh as make bench
// BENCH=agentcpu sees it: 1,000 programs held by this process, 50 of them
// reloaded (new ids) before every refresh, then the holders read through
// the task_file iterator, the refresh and apply on every program. The
// reload and the program read are outside the timer. holders-ns/op is the
// holders read alone (the kernel's walk and Scanner.Scan), rest-ns/op the
// refresh and apply.
func BenchmarkOwnerRefresh(b *testing.B) {
	progs := scantest.LoadPrograms(b, 1000)
	a, err := New(Config{Owners: true, OwnerIterator: true})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	if a.attr.iterErr != nil {
		b.Logf("%v", a.attr.iterErr)
	}
	a.attr.filler = cgroupFiller{}
	ctx := context.Background()
	for range 2 {
		if _, err := a.Scan(ctx); err != nil {
			b.Fatal(err)
		}
	}
	next := 0
	reload := func(k int) {
		for range k {
			i := next % len(progs)
			progs[i].Close()
			p, err := ebpf.NewProgram(scantest.SocketFilterSpec())
			if err != nil {
				b.Fatal(err)
			}
			progs[i] = p
			next++
		}
	}
	r := reader.New(reader.Options{NoIterator: true})
	defer r.Close()
	var tHolders, tRest time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		reload(50)
		v, _, err := r.ReadView(time.Now())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		h := a.attr.readHolders()
		t1 := time.Now()
		for _, err := range a.attr.refresh(v, h) {
			b.Logf("refresh: %v", err)
		}
		for j := range v.Len() {
			a.attr.apply(v.At(j))
		}
		t2 := time.Now()
		tHolders += t1.Sub(t0)
		tRest += t2.Sub(t1)
	}
	b.ReportMetric(float64(tHolders.Nanoseconds())/float64(b.N), "holders-ns/op")
	b.ReportMetric(float64(tRest.Nanoseconds())/float64(b.N), "rest-ns/op")
}

// uidFiller names the pods in known as the Kubernetes API would (namespace
// shop, Deployment web), by pod UID; gen moves when known changes.
type uidFiller struct {
	known map[string]bool
	gen   uint64
}

func (f *uidFiller) Fill(o *Owner) {
	o.FillFromCgroup()
	if f.known[o.PodUID] {
		o.PodName, o.PodNamespace, o.WorkloadKind, o.WorkloadName = "web-6d4cf56db6-"+o.PodUID[:5], "shop", "Deployment", "web"
	}
}

func (f *uidFiller) Generation() uint64 { return f.gen }

// BenchmarkOwnerRefreshPods is BenchmarkOwnerRefresh on a node's pods: 50
// pods (test/pods) with the 6 per-pod kinds of program, 300 programs: runc's
// device programs and the tc and XDP programs no process holds, found
// through the cgroup and interface walks, and cgroup and tcx links this
// process holds; half the pods named by the filler. Every iteration reads
// the holders, refreshes and applies on every program.
func BenchmarkOwnerRefreshPods(b *testing.B) {
	set := pods.New(b, 50, pods.Kinds...)
	a, err := New(Config{Owners: true, OwnerIterator: true})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	known := map[string]bool{}
	for _, p := range set.Pods {
		known[p.UID] = p.Index%2 == 0
	}
	a.SetOwnerFiller(&uidFiller{known: known, gen: 1})
	ctx := context.Background()
	for range 2 {
		if _, err := a.Scan(ctx); err != nil {
			b.Fatal(err)
		}
	}
	r := reader.New(reader.Options{NoIterator: true})
	defer r.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		v, _, err := r.ReadView(time.Now())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, err := range a.attr.refresh(v, a.attr.readHolders()) {
			b.Logf("refresh: %v", err)
		}
		for j := range v.Len() {
			a.attr.apply(v.At(j))
		}
	}
}
