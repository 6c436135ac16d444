package owners

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// BenchmarkProcWalk compares the owner walk with two floors measured in the
// same run: listing every /proc/PID/fd directory without looking at the fds
// (ReadDirOnly), and the obvious implementation with os.ReadDir and
// os.Readlink per fd (Naive). Each reports ns per process and per fd.
func BenchmarkProcWalk(b *testing.B) {
	prog, _ := loadProg(b, ebpf.SocketFilter)
	_ = prog
	var st Stats
	if _, err := NewProcSource("").Holdings(nil, &st); err != nil {
		b.Fatal(err)
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(st.Procs), "ns/proc")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(st.FDs), "ns/fd")
	}
	b.Logf("%d processes, %d fds, %d bpf fds, %d denied", st.Procs, st.FDs, st.BPFFDs, st.Denied)

	b.Run("ReadDirOnly", func(b *testing.B) {
		for b.Loop() {
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				os.ReadDir("/proc/" + e.Name() + "/fd")
			}
		}
		report(b)
	})
	b.Run("Naive", func(b *testing.B) {
		for b.Loop() {
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				dir := "/proc/" + e.Name() + "/fd/"
				fds, _ := os.ReadDir(dir)
				for _, fd := range fds {
					if l, err := os.Readlink(dir + fd.Name()); err == nil && (l == linkBPFProg || l == linkBPFLink) {
						os.ReadFile("/proc/" + e.Name() + "/fdinfo/" + fd.Name())
					}
				}
			}
		}
		report(b)
	})
	b.Run("ProcSource", func(b *testing.B) {
		src := NewProcSource("")
		var h []Holding
		b.ReportAllocs()
		for b.Loop() {
			var st Stats
			h, _ = src.Holdings(h[:0], &st)
		}
		report(b)
	})
	b.Run("Scanner", func(b *testing.B) {
		s := NewScanner("", nil)
		b.ReportAllocs()
		for b.Loop() {
			s.Scan(nil)
		}
		report(b)
	})
}

// BenchmarkCgroupAttachments walks 50 empty cgroups: all 28 cgroup attach
// types against only those of cgroup_device programs.
func BenchmarkCgroupAttachments(b *testing.B) {
	mount, err := CgroupV2Mount()
	if err != nil {
		b.Skipf("no cgroup v2: %v", err)
	}
	root := filepath.Join(mount, "bpfleet-owners-bench-"+strconv.Itoa(os.Getpid()))
	for i := range 50 {
		if err := os.MkdirAll(filepath.Join(root, strconv.Itoa(i)), 0o755); err != nil {
			b.Skipf("creating cgroups: %v", err)
		}
	}
	b.Cleanup(func() {
		for i := range 50 {
			os.Remove(filepath.Join(root, strconv.Itoa(i)))
		}
		os.Remove(root)
	})
	for _, tc := range []struct {
		name  string
		types []ebpf.ProgramType
	}{{"AllTypes", nil}, {"DeviceOnly", []ebpf.ProgramType{ebpf.CGroupDevice}}} {
		b.Run(tc.name, func(b *testing.B) {
			var st AttachStats
			for b.Loop() {
				_, st = CgroupAttachments(root, CgroupOptions{ProgTypes: tc.types})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(st.Targets), "ns/cgroup")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(st.Queries), "ns/query")
		})
	}
}

func readDirOnly() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		os.ReadDir("/proc/" + e.Name() + "/fd")
	}
}

func naiveWalk() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		dir := "/proc/" + e.Name() + "/fd/"
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			if l, err := os.Readlink(dir + fd.Name()); err == nil && (l == linkBPFProg || l == linkBPFLink) {
				os.ReadFile("/proc/" + e.Name() + "/fdinfo/" + fd.Name())
			}
		}
	}
}

// BenchmarkProcWalkRatio interleaves the three walks in every iteration, so
// load from other work on the machine hits them alike, and reports
// ProcSource's time as a ratio of each floor.
func BenchmarkProcWalkRatio(b *testing.B) {
	src := NewProcSource("")
	var h []Holding
	var st Stats
	var tRead, tNaive, tOurs time.Duration
	for b.Loop() {
		t0 := time.Now()
		readDirOnly()
		t1 := time.Now()
		naiveWalk()
		t2 := time.Now()
		st = Stats{}
		h, _ = src.Holdings(h[:0], &st)
		t3 := time.Now()
		tRead += t1.Sub(t0)
		tNaive += t2.Sub(t1)
		tOurs += t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tOurs.Nanoseconds())/n/float64(st.Procs), "ours-ns/proc")
	b.ReportMetric(float64(tOurs.Nanoseconds())/n/float64(st.FDs), "ours-ns/fd")
	b.ReportMetric(float64(tRead.Nanoseconds())/n/float64(st.Procs), "readdir-ns/proc")
	b.ReportMetric(float64(tOurs)/float64(tRead), "ours/readdir")
	b.ReportMetric(float64(tOurs)/float64(tNaive), "ours/naive")
	b.Logf("%d processes, %d fds, %d bpf fds", st.Procs, st.FDs, st.BPFFDs)
}

// BenchmarkScanPins walks a bpffs directory of 3,000 pinned maps and 30
// pinned programs, as a node whose loader pins its maps leaves it: a walk
// that opens every file (Cold: ScanPins, what each owner refresh did) and
// one by a PinScanner that has seen them (Steady: nothing new), against
// the floor of listing the directory (ReadDirOnly).
func BenchmarkScanPins(b *testing.B) {
	root, err := os.MkdirTemp("/sys/fs/bpf", "bpfleet-pins-bench-")
	if err != nil {
		b.Skipf("a directory on bpffs: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	for i := range 3000 {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			b.Fatal(err)
		}
		err = m.Pin(filepath.Join(root, "map"+strconv.Itoa(i)))
		m.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	for i := range 30 {
		p, _ := loadProg(b, ebpf.SocketFilter)
		if err := p.Pin(filepath.Join(root, "prog"+strconv.Itoa(i))); err != nil {
			b.Fatal(err)
		}
	}
	roots := []string{root}
	perFile := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/3030, "ns/file")
	}
	b.Run("ReadDirOnly", func(b *testing.B) {
		for b.Loop() {
			os.ReadDir(root)
		}
		perFile(b)
	})
	b.Run("Cold", func(b *testing.B) {
		for b.Loop() {
			if pins, _ := ScanPins(roots, PinOptions{}); len(pins) != 30 {
				b.Fatalf("%d pins, want 30", len(pins))
			}
		}
		perFile(b)
	})
	steady := func(b *testing.B) {
		s := NewPinScanner(PinOptions{})
		defer s.Close()
		s.Scan(roots)
		b.ReportAllocs()
		for b.Loop() {
			if pins, _ := s.Scan(roots); len(pins) != 30 {
				b.Fatalf("%d pins, want 30", len(pins))
			}
		}
		perFile(b)
	}
	// Steady: every file seen before, the directory listed again (its
	// ctime as good as new); Kept: its listing reused.
	b.Run("Steady", func(b *testing.B) {
		defer func(d time.Duration) { racyDir = d }(racyDir)
		racyDir = 1 << 62
		steady(b)
	})
	time.Sleep(racyDir + 100*time.Millisecond) // the directory's ctime old enough
	b.Run("Kept", steady)
}
