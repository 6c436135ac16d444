//go:build ignore

// An iter/bpf_link program (Linux 5.19+) that writes, in one pass over every
// BPF link in the kernel, what BPF_OBJ_GET_INFO_BY_FD would say about each
// link: the header (id, type, program id) and the type's part of struct
// bpf_link_info, in its uapi layout, read from the same kernel structs the
// kernel's fill_link_info() callbacks read — including the kprobe `missed`
// counters of kprobe_multi and perf_event kprobe links, the only link
// fields that change after attach. A link whose fields this kernel does not
// let the program read (a struct that moved, a type it does not know) is
// written without F_KNOWN, and its reader asks the kernel by syscall.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define NAME_LEN 64
#define INFO_LEN 64

// Bits of link_record.flags.
// F_KNOWN: info holds every field of the link's type that the kernel fills,
// except pointers, name lengths, kernel addresses, cookies and netfilter
// flags, which no reader of these records uses.
#define F_KNOWN (1 << 0)
#define F_NAME (1 << 1)  // name holds the link's name string (tracepoint, function, iterator)
#define F_WHOLE (1 << 2) // the record is whole (else only id and type: see known_max_id)
// F_SPLIT: missed_nesting and missed_maxactive hold the two parts of the
// link's kprobe `missed` (they add up to it). Unset where the kernel has no
// missed in bpf_link_info, where a part's field is absent from its kernel
// structs, and where the kernel's one counter mixes both (kprobe_multi
// return probes): the split is unknown there, never zero.
#define F_SPLIT (1 << 3)

// Values of enum trace_event_flags (an anonymous enum whose values moved
// when TRACE_EVENT_FL_FILTERED went away): set by the loader from kernel
// BTF, 0 when this kernel has no such flag.
const volatile __u32 fl_tracepoint = 0;
const volatile __u32 fl_kprobe = 0;

// The highest link id whose fields the reader already holds: link ids are
// handed out in increasing order, so every link up to it was read whole
// before, and a steady-state pass writes only the id and type of those
// (their fields never change) — except kprobe links, whose missed does.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} known_max_id SEC(".maps");

// Must match the layout decoded in linkstats.go.
struct link_record {
	__u32 id;
	__u32 type;
	__u32 prog_id;
	__u32 flags;
	__u32 info_len;  // the kernel's sizeof(struct bpf_link_info)
	__u32 prog_type; // the link's program's type
	__u8 info[INFO_LEN]; // bpf_link_info's union, uapi offsets
	char name[NAME_LEN];
	// The parts of a kprobe link's missed (F_SPLIT): runs the kprobe could
	// not make because another kprobe was running on the CPU (nesting),
	// and returns a kretprobe could not catch because all its instances
	// were in use (maxactive).
	__u64 missed_nesting;
	__u64 missed_maxactive;
};

#define PUT32(off, v) (*(__u32 *)&r->info[(off)] = (__u32)(v))
#define PUT64(off, v) (*(__u64 *)&r->info[(off)] = (__u64)(v))

// Link types (enum bpf_link_type, uapi).
#define LT_RAW_TP 1
#define LT_TRACING 2
#define LT_CGROUP 3
#define LT_ITER 4
#define LT_NETNS 5
#define LT_XDP 6
#define LT_PERF_EVENT 7
#define LT_KPROBE_MULTI 8
#define LT_STRUCT_OPS 9
#define LT_NETFILTER 10
#define LT_TCX 11
#define LT_SOCKMAP 14

// Program types (enum bpf_prog_type, uapi).
#define PT_KPROBE 2
#define PT_TRACEPOINT 5
#define PT_PERF_EVENT 7

// enum bpf_perf_event_type (uapi).
#define PERF_KPROBE 3
#define PERF_KRETPROBE 4
#define PERF_TRACEPOINT 5
#define PERF_EVENT 6

// Since Linux 6.17 every link keeps its attach type in struct bpf_link;
// before, each link type kept its own.
struct bpf_link___at {
	enum bpf_attach_type attach_type;
} __attribute__((preserve_access_index));

struct bpf_tracing_link___old {
	enum bpf_attach_type attach_type;
} __attribute__((preserve_access_index));

struct bpf_cgroup_link___old {
	enum bpf_attach_type type;
} __attribute__((preserve_access_index));

struct bpf_netns_link___old {
	enum bpf_attach_type type;
} __attribute__((preserve_access_index));

struct tcx_link___old {
	u32 location;
} __attribute__((preserve_access_index));

struct sockmap_link___old {
	enum bpf_attach_type attach_type;
} __attribute__((preserve_access_index));

struct bpf_struct_ops_link___lk {
	struct bpf_link link;
	struct bpf_map *map;
} __attribute__((preserve_access_index));

// Kprobe structs, declared here because a kernel built without kprobes
// (the CI host's) has none in its BTF; CO-RE matches them by name on the
// kernels that have them.
struct fprobe___lk {
	unsigned long nmissed;
} __attribute__((preserve_access_index));

struct bpf_kprobe_multi_link___lk {
	struct bpf_link link;
	struct fprobe___lk fp;
	u32 cnt;
	u32 flags; // until the flags moved to struct bpf_link
} __attribute__((preserve_access_index));

struct bpf_link___flags {
	u32 flags;
} __attribute__((preserve_access_index));

struct kprobe___lk {
	unsigned long nmissed;
	void *addr;
	unsigned int offset;
} __attribute__((preserve_access_index));

struct kretprobe___lk {
	struct kprobe___lk kp;
	void *handler;
	int nmissed;
} __attribute__((preserve_access_index));

struct trace_kprobe___lk {
	struct kretprobe___lk rp;
	const char *symbol;
	struct trace_probe tp;
} __attribute__((preserve_access_index));

// as_scalar turns a pointer the verifier tracks into a plain number, so
// that container_of arithmetic on it is allowed (the reads that follow are
// probe reads).
static __always_inline __u64 as_scalar(const void *p)
{
	__u64 v = 0;

	bpf_probe_read_kernel(&v, sizeof(v), &p);
	return v;
}

#define CONTAINER(type, ptr, member) ((type *)(as_scalar(ptr) - bpf_core_field_offset(type, member)))

// read_name copies a kernel string into r->name; a string that may not fit
// is not a name (the reader asks the kernel for it).
static __always_inline int read_name(struct link_record *r, const char *s)
{
	long n;

	if (!s)
		return 1; // the kernel reports an empty name
	n = bpf_probe_read_kernel_str(r->name, sizeof(r->name), s);
	return n > 0 && n < (long)sizeof(r->name);
}

// link_attach_type reads the attach type from struct bpf_link where this
// kernel keeps it there.
static __always_inline int link_attach_type(struct bpf_link *link, __u32 *at)
{
	if (!bpf_core_field_exists(struct bpf_link___at, attach_type))
		return 0;
	*at = BPF_CORE_READ((struct bpf_link___at *)link, attach_type);
	return 1;
}

// One reader per link type. Each runs only after its caller checked that
// the kernel's bpf_link_info has the type's member and that the kernel has
// the link's struct: the verifier walks every case (the type is not known
// to it), so a CO-RE read of a struct this kernel lacks must sit behind a
// check that CO-RE turns into a constant, or the load fails.

static __always_inline int read_raw_tp(struct bpf_link *link, struct link_record *r)
{
	struct bpf_raw_tp_link *l = CONTAINER(struct bpf_raw_tp_link, link, link);

	return read_name(r, BPF_CORE_READ(l, btp, tp, name));
}

static __always_inline int read_tracing(struct bpf_link *link, struct link_record *r)
{
	struct bpf_tracing_link *l = CONTAINER(struct bpf_tracing_link, link, link);
	__u32 at = 0;
	__u64 key;

	if (!link_attach_type(link, &at)) {
		if (!bpf_core_field_exists(struct bpf_tracing_link___old, attach_type))
			return 0;
		at = BPF_CORE_READ((struct bpf_tracing_link___old *)l, attach_type);
	}
	PUT32(0, at);
	if (bpf_core_field_exists(struct bpf_link_info, tracing.target_btf_id)) {
		key = BPF_CORE_READ(l, trampoline, key); // bpf_trampoline_unpack_key()
		PUT32(4, key >> 32);
		PUT32(8, key & 0x7FFFFFFF);
	}
	return 1;
}

static __always_inline int read_cgroup(struct bpf_link *link, struct link_record *r)
{
	struct bpf_cgroup_link *l = CONTAINER(struct bpf_cgroup_link, link, link);
	struct cgroup *cg;
	__u32 at = 0;

	if (!link_attach_type(link, &at)) {
		if (!bpf_core_field_exists(struct bpf_cgroup_link___old, type))
			return 0;
		at = BPF_CORE_READ((struct bpf_cgroup_link___old *)l, type);
	}
	cg = BPF_CORE_READ(l, cgroup);
	if (cg)
		PUT64(0, BPF_CORE_READ(cg, kn, id));
	PUT32(8, at);
	return 1;
}

static __always_inline int read_iter(struct bpf_link *link, struct link_record *r)
{
	struct bpf_iter_link *l = CONTAINER(struct bpf_iter_link, link, link);

	return read_name(r, BPF_CORE_READ(l, tinfo, reg_info, target));
}

static __always_inline int read_netns(struct bpf_link *link, struct link_record *r)
{
	struct bpf_netns_link *l = CONTAINER(struct bpf_netns_link, link, link);
	struct net *net;
	__u32 at = 0;

	if (!link_attach_type(link, &at)) {
		if (!bpf_core_field_exists(struct bpf_netns_link___old, type))
			return 0;
		at = BPF_CORE_READ((struct bpf_netns_link___old *)l, type);
	}
	net = BPF_CORE_READ(l, net);
	if (net)
		PUT32(0, BPF_CORE_READ(net, ns.inum));
	PUT32(4, at);
	return 1;
}

static __always_inline int read_xdp(struct bpf_link *link, struct link_record *r)
{
	struct bpf_xdp_link *l = CONTAINER(struct bpf_xdp_link, link, link);
	struct net_device *dev = BPF_CORE_READ(l, dev);

	if (dev)
		PUT32(0, BPF_CORE_READ(dev, ifindex));
	return 1;
}

static __always_inline int read_tcx(struct bpf_link *link, struct link_record *r)
{
	struct tcx_link *l = CONTAINER(struct tcx_link, link, link);
	struct net_device *dev;
	__u32 at = 0;

	if (!link_attach_type(link, &at)) {
		if (!bpf_core_field_exists(struct tcx_link___old, location))
			return 0;
		at = BPF_CORE_READ((struct tcx_link___old *)l, location);
	}
	dev = BPF_CORE_READ(l, dev);
	if (dev)
		PUT32(0, BPF_CORE_READ(dev, ifindex));
	PUT32(4, at);
	return 1;
}

static __always_inline int read_sockmap(struct bpf_link *link, struct link_record *r)
{
	struct sockmap_link *l = CONTAINER(struct sockmap_link, link, link);
	struct bpf_map *m;
	__u32 at = 0;

	if (!link_attach_type(link, &at)) {
		if (!bpf_core_field_exists(struct sockmap_link___old, attach_type))
			return 0;
		at = BPF_CORE_READ((struct sockmap_link___old *)l, attach_type);
	}
	m = BPF_CORE_READ(l, map);
	if (m)
		PUT32(0, BPF_CORE_READ(m, id));
	PUT32(4, at);
	return 1;
}

static __always_inline int read_struct_ops(struct bpf_link *link, struct link_record *r)
{
	struct bpf_struct_ops_link___lk *l = CONTAINER(struct bpf_struct_ops_link___lk, link, link);
	struct bpf_map *m = BPF_CORE_READ(l, map);

	if (m)
		PUT32(0, BPF_CORE_READ(m, id));
	return 1;
}

static __always_inline int read_netfilter(struct bpf_link *link, struct link_record *r)
{
	struct bpf_nf_link *l = CONTAINER(struct bpf_nf_link, link, link);

	PUT32(0, BPF_CORE_READ(l, hook_ops.pf));
	PUT32(4, BPF_CORE_READ(l, hook_ops.hooknum));
	PUT32(8, BPF_CORE_READ(l, hook_ops.priority));
	return 1;
}

static __always_inline int read_kprobe_multi(struct bpf_link *link, struct link_record *r)
{
	struct bpf_kprobe_multi_link___lk *l = CONTAINER(struct bpf_kprobe_multi_link___lk, link, link);
	__u64 missed;

	if (bpf_core_field_exists(struct bpf_kprobe_multi_link___lk, flags))
		PUT32(12, BPF_CORE_READ(l, flags));
	else if (bpf_core_field_exists(struct bpf_link___flags, flags))
		PUT32(12, BPF_CORE_READ((struct bpf_link___flags *)link, flags));
	else
		return 0;
	PUT32(8, BPF_CORE_READ(l, cnt));
	if (bpf_core_field_exists(struct bpf_link_info, kprobe_multi.missed)) {
		if (!bpf_core_field_exists(struct bpf_kprobe_multi_link___lk, fp.nmissed))
			return 0;
		missed = BPF_CORE_READ(l, fp.nmissed);
		PUT64(16, missed);
		// fp.nmissed is the fprobe's one counter. On an entry-only
		// fprobe it counts nesting: ftrace recursion
		// (ftrace_test_recursion_trylock failed) and a kprobe already
		// running on the CPU (kprobe_running() in
		// fprobe_kprobe_handler). A return probe (exit_handler) adds
		// what has nothing to do with nesting: no free rethook node
		// (rethook_try_get, its pool sized like maxactive, also NULL
		// where RCU is not watching), rethook_hook failing, and from
		// 6.14's fgraph-based fprobe a failed fgraph data reservation
		// (fprobe_entry). So the split is known only for entry probes.
		// (BPF_F_KPROBE_MULTI_RETURN is bit 0 of the link's flags.)
		if (!(*(__u32 *)&r->info[12] & 1)) {
			r->missed_nesting = missed;
			r->missed_maxactive = 0;
			r->flags |= F_SPLIT;
		}
	}
	return 1;
}

// read_kprobe reads a perf_event kprobe link as bpf_get_kprobe_info() does:
// the event's primary trace_kprobe (trace_kprobe_primary_from_call()).
static __always_inline int read_kprobe(struct trace_event_call *call, struct link_record *r)
{
	struct trace_probe_event *tpe = CONTAINER(struct trace_probe_event, call, call);
	struct trace_kprobe___lk *tk;
	struct trace_probe *tp;
	struct list_head *first;
	__u64 nesting, maxactive = 0;
	int ret;

	first = BPF_CORE_READ(tpe, probes.next);
	if (!first || as_scalar(first) == as_scalar(&tpe->probes))
		return 0; // an empty list: the kernel says EINVAL too
	tp = CONTAINER(struct trace_probe, first, list);
	tk = CONTAINER(struct trace_kprobe___lk, tp, tp);
	ret = BPF_CORE_READ(tk, rp.handler) != 0; // trace_kprobe_is_return()
	PUT32(0, ret ? PERF_KRETPROBE : PERF_KPROBE);
	PUT32(20, BPF_CORE_READ(tk, rp.kp.offset));
	// addr (24) is not read: the kernel shows it only to readers
	// allowed to see kernel addresses.
	if (bpf_core_field_exists(struct bpf_link_info, perf_event.kprobe.missed)) {
		// trace_kprobe_missed(): the kprobe's nmissed, plus the
		// kretprobe's for a return probe. The kprobe's counts the hits
		// it skipped because a kprobe was already running on the CPU
		// (kprobes_inc_nmissed_count: re-entry, or kprobe_running() in
		// the ftrace-based handler): nesting. (A run turned away under
		// bpf_prog_active is counted in the program's recursion_misses,
		// not here.) The kretprobe's counts entries that found no free
		// instance (its pool holds maxactive: a freelist before 6.7,
		// an objpool or rethook since; rethook_try_get also fails
		// where RCU is not watching, and old kernels counted NMI
		// entries there): maxactive. struct kretprobe has had its
		// nmissed on every kernel, with or without rethook; a kernel
		// without either field leaves the link to a syscall read.
		if (!bpf_core_field_exists(struct kprobe___lk, nmissed) ||
		    !bpf_core_field_exists(struct kretprobe___lk, nmissed))
			return 0;
		nesting = BPF_CORE_READ(tk, rp.kp.nmissed);
		if (ret)
			maxactive = (__u32)BPF_CORE_READ(tk, rp.nmissed); // an int
		PUT64(32, nesting + maxactive);
		r->missed_nesting = nesting;
		r->missed_maxactive = maxactive; // 0 for a kprobe: it has no instances
		r->flags |= F_SPLIT;
	}
	return read_name(r, BPF_CORE_READ(tk, symbol));
}

static __always_inline int read_perf_event(struct bpf_link *link, struct link_record *r)
{
	struct bpf_perf_link *l = CONTAINER(struct bpf_perf_link, link, link);
	struct trace_event_call *call;
	struct perf_event *ev;
	const char *name;
	__u32 flags;

	ev = BPF_CORE_READ(l, perf_file, private_data);
	if (!ev)
		return 0;
	if (r->prog_type == PT_PERF_EVENT) {
		// bpf_perf_link_fill_perf_event()
		PUT32(0, PERF_EVENT);
		PUT64(8, BPF_CORE_READ(ev, attr.config));
		PUT32(16, BPF_CORE_READ(ev, attr.type));
		return 1;
	}
	call = BPF_CORE_READ(ev, tp_event);
	if (!call)
		return 0;
	flags = BPF_CORE_READ(call, flags);
	if (r->prog_type == PT_TRACEPOINT) {
		// bpf_get_perf_event_info(): a tracepoint's name, or a syscall
		// event's (whose union holds the name itself).
		if (!fl_tracepoint)
			return 0;
		if (flags & fl_tracepoint)
			name = BPF_CORE_READ(call, tp, name);
		else
			name = BPF_CORE_READ(call, name);
		PUT32(0, PERF_TRACEPOINT);
		return read_name(r, name);
	}
	if (r->prog_type == PT_KPROBE && fl_kprobe && (flags & fl_kprobe)) {
		if (!bpf_core_type_exists(struct trace_kprobe___lk) || !bpf_core_type_exists(struct trace_probe_event))
			return 0;
		return read_kprobe(call, r);
	}
	return 0; // uprobes and other events: by syscall
}

// INFO(member): the kernel's bpf_link_info has the link type's member.
#define INFO(member) bpf_core_field_exists(struct bpf_link_info, member)

SEC("iter/bpf_link")
int dump_link(struct bpf_iter__bpf_link *ctx)
{
	struct bpf_link *link = ctx->link;
	struct link_record r = {};
	__u32 zero = 0, *known_max;
	int known = 0;

	if (!link)
		return 0; // end of iteration
	r.id = link->id;
	if (!r.id)
		return 0; // not settled yet (bpf_link_settle): not a link to report
	r.type = link->type;
	known_max = bpf_map_lookup_elem(&known_max_id, &zero);
	if (known_max && r.id <= *known_max && r.type != LT_KPROBE_MULTI && r.type != LT_PERF_EVENT)
		goto emit_short;
	r.flags |= F_WHOLE;
	r.prog_id = link->prog->aux->id;
	r.prog_type = link->prog->type;
	r.info_len = bpf_core_type_size(struct bpf_link_info);

	// For each type: a kernel whose bpf_link_info has no member for it
	// fills nothing (no_info); one whose struct for it this program
	// cannot name leaves the link to a syscall read (known stays 0).
	switch (r.type) {
	case LT_RAW_TP:
		if (!INFO(raw_tracepoint))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_raw_tp_link))
			known = read_raw_tp(link, &r);
		break;
	case LT_TRACING:
		if (!INFO(tracing))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_tracing_link))
			known = read_tracing(link, &r);
		break;
	case LT_CGROUP:
		if (!INFO(cgroup))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_cgroup_link))
			known = read_cgroup(link, &r);
		break;
	case LT_ITER:
		if (!INFO(iter))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_iter_link))
			known = read_iter(link, &r);
		break;
	case LT_NETNS:
		if (!INFO(netns))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_netns_link))
			known = read_netns(link, &r);
		break;
	case LT_XDP:
		if (!INFO(xdp))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_xdp_link))
			known = read_xdp(link, &r);
		break;
	case LT_TCX:
		if (!INFO(tcx))
			goto no_info;
		if (bpf_core_type_exists(struct tcx_link))
			known = read_tcx(link, &r);
		break;
	case LT_SOCKMAP:
		if (!INFO(sockmap))
			goto no_info;
		if (bpf_core_type_exists(struct sockmap_link))
			known = read_sockmap(link, &r);
		break;
	case LT_STRUCT_OPS:
		if (!INFO(struct_ops))
			goto no_info;
		if (bpf_core_field_exists(struct bpf_struct_ops_link___lk, map))
			known = read_struct_ops(link, &r);
		break;
	case LT_NETFILTER:
		if (!INFO(netfilter))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_nf_link))
			known = read_netfilter(link, &r);
		break;
	case LT_KPROBE_MULTI:
		if (!INFO(kprobe_multi))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_kprobe_multi_link___lk))
			known = read_kprobe_multi(link, &r);
		break;
	case LT_PERF_EVENT:
		if (!INFO(perf_event))
			goto no_info;
		if (bpf_core_type_exists(struct bpf_perf_link))
			known = read_perf_event(link, &r);
		break;
	}
	goto emit;
no_info:
	// This kernel's bpf_link_info has nothing for the link's type: the
	// union stays zero, as BPF_OBJ_GET_INFO_BY_FD would leave it.
	known = 1;
emit:
	if (known)
		r.flags |= F_KNOWN;
	if (known && r.name[0])
		r.flags |= F_NAME;
emit_short:
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
