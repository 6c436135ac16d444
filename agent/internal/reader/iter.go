package reader

import (
	"fmt"

	"github.com/bpfleet/bpfleet/probes/progiter"
)

// progIterFacts adapts the bpf_prog iterator (probes/progiter) to a
// FactsSource.
type progIterFacts struct {
	it  *progiter.Iter
	buf map[uint32]progiter.Record
}

// loadProgIter loads the facts iterator with its CO-RE result cached in
// the reader's cache directory.
func (r *Reader) loadProgIter() (FactsSource, error) {
	it, li, err := progiter.LoadCached(r.cacheDir)
	r.noteCache(li.CacheErr)
	if err != nil {
		return nil, err
	}
	return &progIterFacts{it: it, buf: map[uint32]progiter.Record{}}, nil
}

func (f *progIterFacts) ReadFacts(dst map[uint32]ProgFacts) error {
	if err := f.it.Read(f.buf); err != nil {
		return err
	}
	clear(dst)
	for id, r := range f.buf {
		dst[id] = ProgFacts{ExpectedAttachType: r.ExpectedAttachType, Sleepable: r.Sleepable, SleepableKnown: r.SleepableKnown, AttachFunc: r.AttachFunc}
	}
	return nil
}

func (f *progIterFacts) Close() error { return f.it.Close() }

// needsFacts says whether a program type has facts only the iterator
// knows: the trampoline family's expected attach type (fentry vs fentry.s,
// fexit, fmod_ret, lsm), which bpf_prog_info lacks.
func needsFacts(progType uint32) bool {
	switch progType {
	case progTypeTracing, progTypeLSM, progTypeExt, progTypeStructOps:
		return true
	}
	return false
}

// ensureFacts loads the iterator the first time a scan meets a program that
// needs it, so nodes (and one-shot commands) without such programs never
// pay for loading kernel BTF and a CO-RE program. A refusal is remembered
// and reported once per snapshot in Degraded.
func (r *Reader) ensureFacts() {
	if r.source != nil || r.factsErr != nil || r.loadFacts == nil {
		return
	}
	src, err := r.loadFacts()
	if err != nil {
		r.factsErr = fmt.Errorf("bpf_prog iterator unavailable (%w): sleepable programs cannot be told apart and unattached tracing programs have no attach type", err)
		return
	}
	r.source = src
}
