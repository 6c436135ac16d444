// Package bpfsys is the project's one kernel boundary for bpf(2): every
// command it issues itself, the uapi layouts they fill (struct
// bpf_prog_info, struct bpf_link_info and the offsets of its per-kind
// union, the BPF_PROG_LOAD and BPF_PROG_TEST_RUN attrs), and every read
// of fdinfo (a BPF object's memlock, the ids behind another process's fd).
// No other package calls SYS_BPF (TestOneBoundary). What cilium/ebpf
// already does well (loading collections, links, maps by handle) stays
// with cilium/ebpf; this package holds what it does not offer or does at
// a cost a scan cannot pay.
//
// It decodes nothing beyond the kernel's layouts: turning them into
// programs and links is the reader's job. The calls of a scan (next id,
// fd by id, object info, close, the memlock reads) are counted in
// SyscallCount for the benchmarks; the rest are not.
package bpfsys
