// Package layoutcheck holds internal/bpfsys's hand-written layouts to a
// kernel's own BTF. It is test-only: internal/bpfsys's tests run it on the
// host, test/kernels/ktest on every matrix kernel.
package layoutcheck

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// Run checks bpfsys's layouts, written by hand from the uapi header,
// against the running kernel's BTF: each Go field of ProgInfo and each
// offset into bpf_link_info's union must sit where the kernel's struct has
// it, and each field of TaskFDQueryAttr where bpf_attr's task_fd_query
// has it. A member the kernel does not have yet is logged (its info_len
// stops before it); a kernel without BTF skips with the kernel's error.
func Run(t *testing.T) {
	t.Helper()
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Skipf("the kernel gave no BTF to check the layouts against: %v", err)
	}
	find := func(name string) *btf.Struct {
		var s *btf.Struct
		if err := spec.TypeByName(name, &s); err != nil {
			t.Fatalf("struct %s in the kernel's BTF: %v", name, err)
		}
		return s
	}

	prog := find("bpf_prog_info")
	progFields := map[string]string{
		"Type": "type", "ID": "id", "Tag": "tag", "JitedProgLen": "jited_prog_len",
		"XlatedProgLen": "xlated_prog_len", "JitedProgInsns": "jited_prog_insns",
		"XlatedProgInsns": "xlated_prog_insns", "LoadTime": "load_time",
		"CreatedByUID": "created_by_uid", "NrMapIDs": "nr_map_ids", "MapIDs": "map_ids",
		"Name": "name", "Ifindex": "ifindex", "GPLCompatible": "gpl_compatible",
		"NetnsDev": "netns_dev", "NetnsIno": "netns_ino", "NrJitedKsyms": "nr_jited_ksyms",
		"NrJitedFuncLens": "nr_jited_func_lens", "JitedKsyms": "jited_ksyms",
		"JitedFuncLens": "jited_func_lens", "BTFID": "btf_id",
		"FuncInfoRecSize": "func_info_rec_size", "FuncInfo": "func_info",
		"NrFuncInfo": "nr_func_info", "NrLineInfo": "nr_line_info", "LineInfo": "line_info",
		"JitedLineInfo": "jited_line_info", "NrJitedLineInfo": "nr_jited_line_info",
		"LineInfoRecSize": "line_info_rec_size", "JitedLineInfoRecSize": "jited_line_info_rec_size",
		"NrProgTags": "nr_prog_tags", "ProgTags": "prog_tags", "RunTimeNs": "run_time_ns",
		"RunCnt": "run_cnt", "RecursionMisses": "recursion_misses",
		"VerifiedInsns": "verified_insns", "AttachBTFObjID": "attach_btf_obj_id",
		"AttachBTFID": "attach_btf_id",
	}
	rt := reflect.TypeFor[bpfsys.ProgInfo]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.Name == "_" {
			continue
		}
		c, ok := progFields[f.Name]
		if !ok {
			t.Errorf("ProgInfo.%s: no bpf_prog_info member named for it in this test", f.Name)
			continue
		}
		checkOffset(t, prog, "bpf_prog_info", c, 0, uint32(f.Offset))
	}

	// The link union's offsets are from the start of the union, the
	// header's four u32 before it.
	link := find("bpf_link_info")
	for _, c := range []struct {
		path string
		off  int
	}{
		{"raw_tracepoint.tp_name", bpfsys.LinkRawTPName}, {"raw_tracepoint.tp_name_len", bpfsys.LinkRawTPNameLen},
		{"tracing.attach_type", bpfsys.LinkTracingAttachType}, {"tracing.target_obj_id", bpfsys.LinkTracingTargetObj},
		{"tracing.target_btf_id", bpfsys.LinkTracingTargetBTF},
		{"cgroup.cgroup_id", bpfsys.LinkCgroupID}, {"cgroup.attach_type", bpfsys.LinkCgroupAttachType},
		{"iter.target_name", bpfsys.LinkIterName}, {"iter.target_name_len", bpfsys.LinkIterNameLen},
		{"netns.netns_ino", bpfsys.LinkNetnsIno}, {"netns.attach_type", bpfsys.LinkNetnsAttachType},
		{"xdp.ifindex", bpfsys.LinkIfindex}, {"tcx.ifindex", bpfsys.LinkIfindex}, {"tcx.attach_type", bpfsys.LinkIfAttachType},
		{"netkit.ifindex", bpfsys.LinkIfindex}, {"netkit.attach_type", bpfsys.LinkIfAttachType},
		{"sockmap.map_id", bpfsys.LinkSockmapMapID}, {"sockmap.attach_type", bpfsys.LinkIfAttachType},
		{"kprobe_multi.count", bpfsys.LinkKMultiCount}, {"kprobe_multi.flags", bpfsys.LinkKMultiFlags},
		{"kprobe_multi.missed", bpfsys.LinkKMultiMissed},
		{"uprobe_multi.path", bpfsys.LinkUMultiPath}, {"uprobe_multi.path_size", bpfsys.LinkUMultiPathSize},
		{"uprobe_multi.count", bpfsys.LinkUMultiCount}, {"uprobe_multi.flags", bpfsys.LinkUMultiFlags},
		{"perf_event.type", bpfsys.LinkPerfType},
		{"perf_event.kprobe.func_name", bpfsys.LinkPerfName}, {"perf_event.kprobe.name_len", bpfsys.LinkPerfNameLen},
		{"perf_event.kprobe.offset", bpfsys.LinkPerfOffset}, {"perf_event.kprobe.missed", bpfsys.LinkPerfKprobeMissed},
		{"perf_event.uprobe.file_name", bpfsys.LinkPerfName}, {"perf_event.uprobe.name_len", bpfsys.LinkPerfNameLen},
		{"perf_event.uprobe.offset", bpfsys.LinkPerfOffset},
		{"perf_event.tracepoint.tp_name", bpfsys.LinkPerfName}, {"perf_event.tracepoint.name_len", bpfsys.LinkPerfNameLen},
		{"netfilter.pf", bpfsys.LinkNFPf}, {"netfilter.hooknum", bpfsys.LinkNFHooknum}, {"netfilter.priority", bpfsys.LinkNFPriority},
	} {
		checkOffset(t, link, "bpf_link_info", c.path, 16, uint32(c.off))
	}

	// BPF_TASK_FD_QUERY's attr: the owner walk's question about a
	// perf_event fd.
	var attr *btf.Union
	if err := spec.TypeByName("bpf_attr", &attr); err != nil {
		t.Fatalf("union bpf_attr in the kernel's BTF: %v", err)
	}
	taskFDFields := map[string]string{
		"PID": "pid", "FD": "fd", "Flags": "flags", "BufLen": "buf_len", "Buf": "buf",
		"ProgID": "prog_id", "FDType": "fd_type", "ProbeOffset": "probe_offset", "ProbeAddr": "probe_addr",
	}
	rt = reflect.TypeFor[bpfsys.TaskFDQueryAttr]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		c, ok := taskFDFields[f.Name]
		if !ok {
			t.Errorf("TaskFDQueryAttr.%s: no bpf_attr.task_fd_query member named for it in this test", f.Name)
			continue
		}
		checkOffset(t, attr, "bpf_attr", "task_fd_query."+c, 0, uint32(f.Offset))
	}
	if got := uint32(reflect.TypeFor[bpfsys.LinkInfo]().Size()); got < link.Size {
		t.Logf("LinkInfo is %d bytes, the kernel's bpf_link_info %d: the members past it are not read", got, link.Size)
	}
}

// checkOffset finds a dotted member path in s (anonymous unions and
// structs searched through) and compares its byte offset, less base, with
// want.
func checkOffset(t *testing.T, s btf.Type, sname, path string, base, want uint32) {
	t.Helper()
	off, err := memberOffset(s, strings.Split(path, "."))
	if errors.Is(err, errNoMember) {
		t.Logf("%s.%s: not in this kernel (%v)", sname, path, err)
		return
	}
	if err != nil {
		t.Errorf("%s.%s: %v", sname, path, err)
		return
	}
	if off-base != want {
		t.Errorf("%s.%s is at byte %d of the kernel's struct; the layout here has it at %d", sname, path, off-base, want)
	}
}

var errNoMember = errors.New("no such member")

// memberOffset is the byte offset of path inside typ.
func memberOffset(typ btf.Type, path []string) (uint32, error) {
	var members []btf.Member
	switch c := btf.UnderlyingType(typ).(type) {
	case *btf.Struct:
		members = c.Members
	case *btf.Union:
		members = c.Members
	default:
		return 0, errors.New("not a struct or union")
	}
	for _, m := range members {
		if m.Name == path[0] {
			if m.Offset%8 != 0 {
				// A bitfield (gpl_compatible:1): the Go field is the
				// u32 that holds it.
				return uint32(m.Offset/8) &^ 3, nil
			}
			if len(path) == 1 {
				return uint32(m.Offset / 8), nil
			}
			off, err := memberOffset(m.Type, path[1:])
			return uint32(m.Offset/8) + off, err
		}
		if m.Name == "" {
			if off, err := memberOffset(m.Type, path); err == nil {
				return uint32(m.Offset/8) + off, nil
			}
		}
	}
	return 0, errNoMember
}
