//go:build ignore

// An iter/task_file program: one read of the iterator walks every open file
// of every process and emits a record for each file that is a BPF program,
// a BPF link or a perf event carrying a BPF program, with the holder's pid,
// fd and comm and the object's ids.
// It answers "which process holds this program" in one pass instead of
// reading /proc/*/fdinfo/* file by file.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define KIND_PROG 1
#define KIND_LINK 2
// A perf event with a program: a kprobe, uprobe or tracepoint attached with
// PERF_EVENT_IOC_SET_BPF. Before Linux 5.15 (no perf_event bpf_link) this
// fd is all that holds such a program; newer loaders keep it beside the
// link. link_id is 0.
#define KIND_PERF 3

// Must match the layout decoded in taskfile.go (recordSize).
struct file_record {
	__u32 tgid;
	__u32 fd;
	__u32 kind;
	__u32 prog_id;
	__u32 link_id;
	__u32 _pad;
	char comm[16];
};

// A bpf file is recognised by its file operations, learned rather than
// looked up: while learning is set, the program notes the file operations
// and inode of the reader's own program and link fds (the iterator's
// program and link, whose fds the loader passes in). The reader is the
// current task, so its tgid needs no pid-namespace translation. Kernel
// symbols (bpf_prog_fops as a __ksym) would need no learning pass, but make
// the loader parse /proc/kallsyms: about 80 ms of every agent start.
bool learning;
__s32 learn_prog_fd = -1;
__s32 learn_link_fd = -1;
__u64 learned_prog_fops;
__u64 learned_link_fops;
__u64 learned_anon_inode;

// Set before load by tests to find every link by name, as links with other
// file operations (bpf_link_fops_poll: struct_ops links) are.
volatile const bool links_by_name = false;

// Anonymous-inode files are named at creation: a link is "bpf_link"
// whichever file operations it got, a perf event "[perf_event]". The
// name lives in the dentry's inline name, longer than the longest name
// compared here, so reading that many bytes stays inside it.
#define ANON_NAME_LEN sizeof("[perf_event]")

static __always_inline bool name_is(const char *name, const char *want, int len)
{
	for (int i = 0; i < len; i++)
		if (name[i] != want[i])
			return false;
	return true;
}

// perf_prog is the program a perf event file carries, NULL for none. The
// member is read by CO-RE: a kernel without it has no BPF on perf events.
static __always_inline struct bpf_prog *perf_prog(struct file *file)
{
	struct perf_event *ev = file->private_data;

	if (!bpf_core_field_exists(ev->prog))
		return NULL;
	return BPF_CORE_READ(ev, prog);
}

SEC("iter/task_file")
int dump_task_file(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct file_record r = {};
	struct bpf_prog *prog = NULL;
	char name[ANON_NAME_LEN];
	__u64 fop;
	int kind;

	if (!task || !file)
		return 0;
	// Threads sharing the group leader's file table would repeat its files
	// (the kernel already skips most of them). A thread with a table of its
	// own (unshare(CLONE_FILES)) is reported under its process.
	if (task->pid != task->tgid && task->files == task->group_leader->files)
		return 0;

	fop = (__u64)file->f_op;
	if (learning && task->tgid == (bpf_get_current_pid_tgid() >> 32)) {
		if (ctx->fd == learn_prog_fd) {
			learned_prog_fops = fop;
			learned_anon_inode = (__u64)file->f_inode;
		} else if (ctx->fd == learn_link_fd) {
			learned_link_fops = fop;
		}
	}

	if (learned_prog_fops && fop == learned_prog_fops) {
		kind = KIND_PROG;
	} else if (learned_link_fops && fop == learned_link_fops && !links_by_name) {
		kind = KIND_LINK;
	} else if (learned_anon_inode && (__u64)file->f_inode == learned_anon_inode) {
		// Only the plain link fops can be learned; links with other
		// fops, and perf events, are found by name among
		// anonymous-inode files (eventfds, epoll, timers... are
		// others).
		if (bpf_probe_read_kernel(name, sizeof(name), file->f_path.dentry->d_name.name))
			return 0;
		// "bpf_link" where the link was made, "bpf-link" where it was
		// opened again from a pin or by id.
		if (name_is(name, "bpf_link", sizeof("bpf_link")) || name_is(name, "bpf-link", sizeof("bpf-link")))
			kind = KIND_LINK;
		else if (name_is(name, "[perf_event]", sizeof("[perf_event]")) && (prog = perf_prog(file)))
			kind = KIND_PERF;
		else
			return 0;
	} else {
		return 0;
	}

	r.tgid = task->tgid;
	r.fd = ctx->fd;
	r.kind = kind;
	if (kind == KIND_PROG) {
		r.prog_id = BPF_CORE_READ((struct bpf_prog *)file->private_data, aux, id);
	} else if (kind == KIND_PERF) {
		r.prog_id = BPF_CORE_READ(prog, aux, id);
	} else {
		struct bpf_link *l = file->private_data;

		r.link_id = BPF_CORE_READ(l, id);
		r.prog_id = BPF_CORE_READ(l, prog, aux, id);
	}
	bpf_probe_read_kernel(r.comm, sizeof(r.comm), task->comm);
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
