package progstats

import (
	"github.com/bpfleet/bpfleet/probes/internal/coreload"
	"github.com/cilium/ebpf"
)

// The iterator is loaded with bpf(BPF_PROG_LOAD) directly, with its CO-RE
// result cached per kernel build (probes/internal/coreload): cilium/ebpf's
// loader parses the whole vmlinux BTF on every load, 20–45 ms of a one-shot
// `bpfleet list` whose scan itself takes under a millisecond.

// LoadInfo says how a load went, for callers that report or measure it.
type LoadInfo = coreload.LoadInfo

// kernelKey is the cache key of this program on the running kernel.
func kernelKey() (string, error) { return coreload.KernelKey(_ProgstatsBytes) }

// object is the iterator's CO-RE identity (probes/internal/coreload).
var object = coreload.Object{Name: "progstats", Bytes: _ProgstatsBytes, Spec: loadProgstats, Prog: "dump_prog", Target: "bpf_prog"}

// Cached says whether dir holds the CO-RE result for the running kernel,
// so that LoadCached would skip kernel BTF.
func Cached(dir string) bool { return object.Cached(dir) }

// LoadCached loads and attaches the iterator for cpus possible CPUs, with
// the CO-RE result cached in dir ("" for no cache). A cache entry the
// verifier refuses is dropped and the load retried from kernel BTF.
func LoadCached(cpus int, dir string) (*Iter, LoadInfo, error) {
	spec, p, err := object.Program()
	if err != nil {
		return nil, LoadInfo{}, err
	}
	return coreload.Load(p, dir, func(c *coreload.Result) (*Iter, error) { return load(spec, c, cpus) })
}

// WarmCache writes the stats iterator's CO-RE result for this kernel into
// dir without loading it, where a one-shot list looks for it before it
// settles for the syscall scan.
func WarmCache(dir string) error { return object.Warm(dir) }

// load creates the maps, loads the patched program and attaches it.
func load(spec *ebpf.CollectionSpec, c *coreload.Result, cpus int) (*Iter, error) {
	prog, maps, err := coreload.Instantiate(spec, "dump_prog", c, map[string]uint32{"nr_cpus": uint32(cpus)})
	if err != nil {
		return nil, err
	}
	it := &Iter{prog: prog, maps: maps, buf: make([]byte, bufSize), names: newNames(), cpus: cpus, known: coreload.NewKnownMaxID(maps, "program")}
	if it.link, it.progID, err = coreload.Attach(prog, "bpf_prog"); err != nil {
		it.Close()
		return nil, err
	}
	return it, nil
}
