// Package reader reads every BPF program and link in the kernel, the
// agent's one view of them per scan. It owns the scan source's choice
// (the bpf_prog iterator, or a running agent's pin of it, else the
// syscall walk, with the reason), the iterator and syscall reads
// (scan.go, scan_iter.go), the steady read that skips the walk while no
// program is loaded or unloaded (scan_steady.go), the links' read
// (scan_links.go) and the naming of their decoded info (link_names.go;
// internal/bpfsys decodes it), link targets and their classes
// (targets.go), the iterator facts (iter.go), the kernel enums' names
// (names.go), the join of links and facts to programs (join.go) and the
// eviction of gone ids. It caches what never changes
// for an id between reads; the agent package (agent.go, assemble.go)
// turns two reads into a snapshot.
package reader
