package mappressure

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// RefusalTargets are the kernel functions whose failures count_refusal
// counts: every update of a hash-family map, from a program or a syscall,
// ends in one of them (ARCHITECTURE.md, "Maps").
var RefusalTargets = []string{
	"htab_map_update_elem",            // hash, hash_of_maps
	"htab_lru_map_update_elem",        // lru_hash
	"htab_percpu_map_update_elem",     // percpu_hash from a program
	"htab_lru_percpu_map_update_elem", // lru_percpu_hash from a program
	"bpf_percpu_hash_update",          // both per-CPU types from a syscall
}

// RefusedCounts is how many updates of one map were refused.
type RefusedCounts struct {
	Full  uint64 // -E2BIG: the map was at max_entries
	NoMem uint64 // -ENOMEM: no memory, or an LRU with no free node
}

// Refusals is the loaded and attached refused-update counter.
type Refusals struct {
	colls   []*ebpf.Collection
	links   []link.Link
	counts  *ebpf.Map
	bss     *ebpf.Map
	dropped *ebpf.Variable
	// Missing names the targets the kernel refused, with why: their
	// maps' refusals are not counted.
	Missing map[string]string
}

// refusalKey is struct refusal_key.
type refusalKey struct{ PrefixLen, ID uint32 }

// LoadRefusals loads count_refusal once per target, all counting into one
// map. A kernel that refuses every target gives a *Refused.
func LoadRefusals() (*Refusals, error) {
	spec, err := parsedSpec()
	if err != nil {
		return nil, fmt.Errorf("reading map pressure spec: %w", err)
	}
	r := &Refusals{Missing: map[string]string{}}
	var first error
	for _, fn := range RefusalTargets {
		s := only(spec, "count_refusal", "refusals")
		s.Programs["count_refusal"].AttachTo = fn
		var opts ebpf.CollectionOptions
		if r.counts != nil {
			// One table and one drop count for every copy.
			opts.MapReplacements = map[string]*ebpf.Map{"refusals": r.counts, ".bss": r.bss}
		}
		coll, err := ebpf.NewCollectionWithOptions(s, opts)
		if err == nil {
			var l link.Link
			if l, err = link.AttachTracing(link.TracingOptions{Program: coll.Programs["count_refusal"]}); err == nil {
				if r.counts == nil {
					r.counts, r.bss, r.dropped = coll.Maps["refusals"], coll.Maps[".bss"], coll.Variables["refusals_dropped"]
				}
				r.colls, r.links = append(r.colls, coll), append(r.links, l)
				continue
			}
			coll.Close()
		}
		if !refused(err) {
			r.Close()
			return nil, fmt.Errorf("refused-update probe on %s: %w", fn, err)
		}
		if first == nil {
			first = err
		}
		r.Missing[fn] = (&Refused{Stage: "load", Err: err}).Reason()
	}
	if r.counts == nil {
		return nil, &Refused{Stage: "load", Err: first}
	}
	return r, nil
}

// Read fills dst (cleared first) with each map id's refused updates since
// the probe was attached; only maps that refused one are present.
func (r *Refusals) Read(dst map[uint32]RefusedCounts) error {
	return readCounts(r.counts, dst, func(k refusalKey) uint32 { return k.ID }, "refused updates")
}

// Dropped is how many refusals were not counted because the probe's own
// table was full.
func (r *Refusals) Dropped() (uint64, error) { return readDropped(r.dropped, "refusals") }

// Forget deletes the counts of maps that are gone.
func (r *Refusals) Forget(ids []uint32) error {
	return forget(r.counts, ids, func(id uint32) refusalKey { return refusalKey{32, id} })
}

// Close detaches and unloads every copy.
func (r *Refusals) Close() error {
	var errs []error
	for _, l := range r.links {
		errs = append(errs, l.Close())
	}
	for _, c := range r.colls {
		c.Close()
	}
	return errors.Join(errs...)
}
