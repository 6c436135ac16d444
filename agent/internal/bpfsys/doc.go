// Package bpfsys owns the agent's direct calls into the kernel: the bpf()
// commands a scan issues (GET_NEXT_ID, GET_FD_BY_ID, OBJ_GET_INFO_BY_FD)
// through RawSyscall, the uapi layouts they fill (struct bpf_prog_info,
// struct bpf_link_info and the offsets of its per-kind union), the count of
// syscalls a scan makes, and the memlock read from our own fdinfo. It
// decodes nothing: turning these layouts into programs and links is the
// reader's job.
package bpfsys
