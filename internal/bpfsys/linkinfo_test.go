package bpfsys

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// recorded is a link's info as TestRecordLinkInfo recorded it: the bytes
// the kernel filled and a name func answering as the kernel did, which
// fails the test when asked at other offsets than the recording's.
func recorded(t *testing.T, kind string) (*LinkInfo, uint32, LinkNameFunc) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(linkinfoDir, kind+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	var info LinkInfo
	if len(raw) > int(unsafe.Sizeof(info)) {
		t.Fatalf("%d bytes recorded, more than bpf_link_info's %d", len(raw), unsafe.Sizeof(info))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&info)), unsafe.Sizeof(info)), raw)
	name := func(ptrOff, lenOff int) string {
		t.Errorf("asked for a name at %d/%d: the kernel wrote none", ptrOff, lenOff)
		return ""
	}
	if named, err := os.ReadFile(filepath.Join(linkinfoDir, kind+".name")); err == nil {
		offs, s, _ := strings.Cut(string(named), "\n")
		name = func(ptrOff, lenOff int) string {
			if got := strconv.Itoa(ptrOff) + " " + strconv.Itoa(lenOff); got != offs {
				t.Errorf("asked for the name at %s, the kernel wrote it at %s", got, offs)
				return ""
			}
			return s
		}
	}
	return &info, uint32(len(raw)), name
}

// TestDecodeLink decodes the link info a real kernel wrote for every link
// type it could make (testdata/linkinfo/RECORDED says which kernel) and
// holds every decoded field to what the recording's links were made with.
func TestDecodeLink(t *testing.T) {
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	for _, c := range []struct {
		kind string
		want LinkDetail
	}{
		{"raw_tracepoint", LinkDetail{Type: LinkTypeRawTracepoint, ID: 0xf640, ProgID: 0x3db03, Name: "sched_process_hang"}},
		{"raw_tracepoint_tp_btf", LinkDetail{Type: LinkTypeRawTracepoint, ID: 0xf641, ProgID: 0x3db04, Name: "sched_process_hang"}},
		{"iter", LinkDetail{Type: LinkTypeIter, ID: 0xf642, ProgID: 0x3db05, Name: "bpf_map"}},
		{"perf_event_tracepoint", LinkDetail{Type: LinkTypePerfEvent, ID: 0xf643, ProgID: 0x3db06, PerfType: PerfEventTracepoint, Name: "sched_process_hang"}},
		{"perf_event_event", LinkDetail{Type: LinkTypePerfEvent, ID: 0xf644, ProgID: 0x3db08, PerfType: 6}}, // BPF_PERF_EVENT_EVENT: no name
		{"perf_event_uprobe", LinkDetail{Type: LinkTypePerfEvent, ID: 0xf645, ProgID: 0x3db09, PerfType: PerfEventUprobe, Name: libc}},
		{"perf_event_uretprobe", LinkDetail{Type: LinkTypePerfEvent, ID: 0xf646, ProgID: 0x3db0a, PerfType: PerfEventUretprobe, Name: libc}},
		{"uprobe_multi", LinkDetail{Type: LinkTypeUprobeMulti, ID: 0xf647, ProgID: 0x3db0b, Name: libc}},
		{"uprobe_multi_return", LinkDetail{Type: LinkTypeUprobeMulti, ID: 0xf648, ProgID: 0x3db0c, Name: libc, Return: true}},
		// BPF_CGROUP_INET_EGRESS on a new cgroup.
		{"cgroup", LinkDetail{Type: LinkTypeCgroup, ID: 0xf649, ProgID: 0x3db0d, AttachType: 1, CgroupID: 0x5524f}},
		// BPF_SK_SKB_STREAM_VERDICT on a new sockmap.
		{"sockmap", LinkDetail{Type: LinkTypeSockmap, ID: 0xf64a, ProgID: 0x3db0e, AttachType: 5, MapID: 0x4cf9a}},
		// On a fresh network namespace's loopback (ifindex 1).
		{"xdp", LinkDetail{Type: LinkTypeXDP, ID: 0xf64b, ProgID: 0x3db0f, Ifindex: 1}},
		{"tcx", LinkDetail{Type: LinkTypeTCX, ID: 0xf64c, ProgID: 0x3db10, AttachType: 47, Ifindex: 1}},               // BPF_TCX_EGRESS
		{"netns", LinkDetail{Type: LinkTypeNetns, ID: 0xf64d, ProgID: 0x3db11, AttachType: 36, NetnsIno: 0xf000014e}}, // BPF_SK_LOOKUP
		// NFPROTO_IPV6, NF_INET_LOCAL_OUT, priority -123.
		{"netfilter", LinkDetail{Type: LinkTypeNetfilter, ID: 0xf64e, ProgID: 0x3db12, Pf: 10, Hooknum: 3, Priority: -123}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			info, n, name := recorded(t, c.kind)
			if got := DecodeLink(info, n, name); got != c.want {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}

// TestDecodeLinkUnrecorded decodes the link types the recording kernel
// could not make (it refuses trampolines and has no kprobes; netkit needs
// a netkit device): their bytes are NOT recorded from a kernel but built
// here from the uapi layout (include/uapi/linux/bpf.h, struct
// bpf_link_info), at literal offsets so that a wrong offset in
// linkinfo.go fails.
func TestDecodeLinkUnrecorded(t *testing.T) {
	type put struct {
		off  int // from the start of bpf_link_info; the union starts at 16
		size int
		v    uint64
	}
	const full = 64 // info_len of a 6.18 kernel
	named := func(ptrOff, lenOff int) string { return "fn@" + strconv.Itoa(ptrOff) + "/" + strconv.Itoa(lenOff) }
	for _, c := range []struct {
		what string
		n    uint32
		puts []put
		want LinkDetail
	}{
		{"tracing fentry", full, []put{{0, 4, LinkTypeTracing}, {4, 4, 5}, {8, 4, 6},
			{16, 4, 24}, {20, 4, 7}, {24, 4, 1234}}, // attach_type BPF_TRACE_FENTRY, target_obj_id, target_btf_id
			LinkDetail{Type: LinkTypeTracing, ID: 5, ProgID: 6, AttachType: 24, TargetObjID: 7, TargetBTFID: 1234}},
		{"kprobe_multi return", full, []put{{0, 4, LinkTypeKprobeMulti}, {4, 4, 5}, {8, 4, 6},
			{16, 8, 0xdead}, {24, 4, 3}, {28, 4, 1}, {32, 8, 42}}, // addrs, count, flags RETURN, missed
			LinkDetail{Type: LinkTypeKprobeMulti, ID: 5, ProgID: 6, Return: true, Count: 3, MissedKnown: true, Missed: 42}},
		{"kprobe_multi before missed", 40, []put{{0, 4, LinkTypeKprobeMulti}, {24, 4, 2}, {32, 8, 42}},
			LinkDetail{Type: LinkTypeKprobeMulti, Count: 2}},
		{"perf_event kprobe", full, []put{{0, 4, LinkTypePerfEvent}, {4, 4, 5}, {8, 4, 6},
			{16, 4, PerfEventKprobe}, {36, 4, 0x10}, {40, 8, 0xffffffff81000000}, {48, 8, 9}}, // type, offset, addr, missed
			LinkDetail{Type: LinkTypePerfEvent, ID: 5, ProgID: 6, PerfType: PerfEventKprobe, Name: "fn@8/16", Offset: 0x10, MissedKnown: true, Missed: 9}},
		{"perf_event kretprobe before missed", 48, []put{{0, 4, LinkTypePerfEvent}, {16, 4, PerfEventKretprobe}, {48, 8, 9}},
			LinkDetail{Type: LinkTypePerfEvent, PerfType: PerfEventKretprobe, Name: "fn@8/16"}},
		{"perf_event before 6.6", 16, []put{{0, 4, LinkTypePerfEvent}},
			LinkDetail{Type: LinkTypePerfEvent}},
		{"netkit", full, []put{{0, 4, LinkTypeNetkit}, {16, 4, 7}, {20, 4, 55}}, // ifindex, BPF_NETKIT_PEER
			LinkDetail{Type: LinkTypeNetkit, Ifindex: 7, AttachType: 55}},
		{"struct_ops", full, []put{{0, 4, LinkTypeStructOps}, {16, 4, 7}}, // map_id, not decoded
			LinkDetail{Type: LinkTypeStructOps}},
	} {
		t.Run(c.what, func(t *testing.T) {
			var info LinkInfo
			b := unsafe.Slice((*byte)(unsafe.Pointer(&info)), unsafe.Sizeof(info))
			for _, p := range c.puts {
				for i := range p.size {
					b[p.off+i] = byte(p.v >> (8 * i))
				}
			}
			if got := DecodeLink(&info, c.n, named); got != c.want {
				t.Errorf("decoded\n%+v\nwant\n%+v", got, c.want)
			}
		})
	}
}
