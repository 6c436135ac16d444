//go:build ignore

// Programs for the kernel-matrix tests: one per attach type whose
// behaviour bpfleet must report, each counting its own runs so the tests can
// hold the kernel's counters against a known answer.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

// Only the test process counts; anything else the kernel does is ignored.
volatile const __u32 target_tgid;

static __always_inline int from_target(void)
{
	return (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

// The recursion scenario of the kernel's selftests/bpf recursion test: a
// delete from hash_outer only counts; a delete from hash_inner makes the
// program delete from hash_inner itself, which re-enters
// htab_map_delete_elem on the same CPU while the program runs, so the
// trampoline skips the nested run and counts one recursion miss.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hash_outer SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hash_inner SEC(".maps");

__u64 outer_runs;
__u64 inner_runs;

static __always_inline int on_delete(struct bpf_map *map)
{
	__u32 key = 0;

	if (map == (struct bpf_map *)&hash_outer) {
		__sync_fetch_and_add(&outer_runs, 1);
		return 0;
	}
	if (map == (struct bpf_map *)&hash_inner) {
		__sync_fetch_and_add(&inner_runs, 1);
		bpf_map_delete_elem(&hash_inner, &key);
	}
	return 0;
}

SEC("fentry/htab_map_delete_elem")
int BPF_PROG(fentry_delete, struct bpf_map *map)
{
	return on_delete(map);
}

SEC("fexit/htab_map_delete_elem")
int BPF_PROG(fexit_delete, struct bpf_map *map, void *key, long ret)
{
	return on_delete(map);
}

// fmod_ret on the kernel's own test target, called by BPF_PROG_TEST_RUN of
// the program; returning 0 lets the original run.
__u64 fmod_ret_runs;

SEC("fmod_ret/bpf_modify_return_test")
int BPF_PROG(fmod_ret_test, int a, int *b, int ret)
{
	__sync_fetch_and_add(&fmod_ret_runs, 1);
	return 0;
}

// Sleepable fentry on the getpgid syscall; the symbol carries the arch's
// syscall wrapper prefix.
#if defined(__TARGET_ARCH_x86)
#define SYSCALL_GETPGID "__x64_sys_getpgid"
#elif defined(__TARGET_ARCH_arm64)
#define SYSCALL_GETPGID "__arm64_sys_getpgid"
#else
#error "unsupported target arch"
#endif

__u64 getpgid_runs;

SEC("fentry.s/" SYSCALL_GETPGID)
int BPF_PROG(fentry_s_getpgid)
{
	if (from_target())
		__sync_fetch_and_add(&getpgid_runs, 1);
	return 0;
}

// LSM hook on every open; allows everything.
__u64 file_open_runs;

SEC("lsm/file_open")
int BPF_PROG(lsm_file_open, struct file *file)
{
	if (from_target())
		__sync_fetch_and_add(&file_open_runs, 1);
	return 0;
}

// kprobe on the hash map update. A map update from user space runs with
// bpf_prog_active held (bpf_disable_instrumentation), so the kernel skips
// this program every time; since Linux 6.7 each skip is counted.
__u64 kprobe_runs;

SEC("kprobe/htab_map_update_elem")
int kprobe_update(void *ctx)
{
	__sync_fetch_and_add(&kprobe_runs, 1);
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hash_kprobe SEC(".maps");

// A kprobe whose program re-enters another kprobe: the getpgid kprobe
// deletes from a hash map, which runs htab_map_delete_elem, where a second
// kprobe sits. The kprobe framework does not nest kprobes, so the second one
// is skipped and its own missed counter (kprobe link info, 6.7+) grows by one
// per getpgid of the test process.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hash_nested SEC(".maps");

SEC("kprobe/" SYSCALL_GETPGID)
int kprobe_getpgid(void *ctx)
{
	__u32 key = 0;

	if (from_target())
		bpf_map_delete_elem(&hash_nested, &key);
	return 0;
}

SEC("kprobe/htab_map_delete_elem")
int kprobe_delete(void *ctx)
{
	return 0;
}
