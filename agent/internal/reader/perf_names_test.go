package reader

import (
	"testing"
	"unsafe"

	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// TestPerfAttachmentsNamedAsLinks: a program attached through a perf_event
// fd with no link (BPF_TASK_FD_QUERY's answer) gets the attach type,
// target and class that the perf_event link of the same probe gets from
// its bpf_link_info (DecodeLink, then the link's naming), so its series
// are the same on a kernel without perf_event links as on one with.
func TestPerfAttachmentsNamedAsLinks(t *testing.T) {
	const ctrPath = "/run/containerd/io.containerd.runtime.v2.task/k8s.io/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef/rootfs/usr/bin/app"
	for _, c := range []struct {
		name     string
		fdType   uint32 // BPF_FD_TYPE_*
		perfType uint32 // the link's bpf_perf_event_type
		probe    string
		offset   uint64
		want     [3]string
	}{
		{"tracepoint", bpfsys.FDTypeTracepoint, bpfsys.PerfEventTracepoint, "task_rename", 0, [3]string{"tracepoint", "task_rename", ""}},
		{"kprobe", bpfsys.FDTypeKprobe, bpfsys.PerfEventKprobe, "htab_map_update_elem", 0, [3]string{"kprobe", "htab_map_update_elem", ""}},
		{"kprobe at an offset", bpfsys.FDTypeKprobe, bpfsys.PerfEventKprobe, "htab_map_update_elem", 0x10, [3]string{"kprobe", "htab_map_update_elem+0x10", ""}},
		{"kretprobe", bpfsys.FDTypeKretprobe, bpfsys.PerfEventKretprobe, "do_sys_openat2", 0, [3]string{"kretprobe", "do_sys_openat2", ""}},
		{"uprobe", bpfsys.FDTypeUprobe, bpfsys.PerfEventUprobe, "/usr/bin/bash", 0x4f2a0, [3]string{"uprobe", "/usr/bin/bash", ""}},
		{"uretprobe in a container", bpfsys.FDTypeUretprobe, bpfsys.PerfEventUretprobe, ctrPath, 0x1000, [3]string{"uretprobe", ctrPath, pathClass(ctrPath)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The link of the same probe, as a 6.7+ kernel writes it.
			var info bpfsys.LinkInfo
			info.Type, info.ID, info.ProgID = bpfsys.LinkTypePerfEvent, 1, 7
			info.SetU32(bpfsys.LinkPerfType, c.perfType)
			if c.perfType == bpfsys.PerfEventKprobe || c.perfType == bpfsys.PerfEventKretprobe {
				info.SetU32(bpfsys.LinkPerfOffset, uint32(c.offset))
			}
			d := bpfsys.DecodeLink(&info, uint32(unsafe.Sizeof(info)), func(int, int) string { return c.probe })
			var ls linkStatic
			namePerfEvent(&ls, &d)
			link := [3]string{ls.link.AttachType, ls.link.Target, ls.link.TargetClass}

			a := owners.PerfAttachment{PID: 1, FD: 3, Known: true,
				Query: bpfsys.TaskFD{ProgID: 7, FDType: c.fdType, Name: c.probe, Offset: c.offset}}
			at, tgt, cl := NamePerfAttachments([]owners.PerfAttachment{a})
			got := [3]string{at, tgt, cl}
			if got != link {
				t.Errorf("perf_event fd named %q, its link %q", got, link)
			}
			if got != c.want {
				t.Errorf("perf_event fd named %q, want %q", got, c.want)
			}
		})
	}

	// A perf_event program on a hardware or software event: the kernel
	// does not describe the fd; named as such a program's link is.
	if at, tgt, cl := NamePerfAttachments([]owners.PerfAttachment{{Query: bpfsys.TaskFD{ProgID: 9}}}); at != "perf_event" || tgt != "" || cl != "" {
		t.Errorf("undescribed perf_event fd named %q %q %q, want perf_event", at, tgt, cl)
	}
	// One probe held by two processes, and a second probe: targets
	// joined as a program's links' are, each once.
	q := func(name string) owners.PerfAttachment {
		return owners.PerfAttachment{Known: true, Query: bpfsys.TaskFD{ProgID: 7, FDType: bpfsys.FDTypeKprobe, Name: name}}
	}
	if at, tgt, _ := NamePerfAttachments([]owners.PerfAttachment{q("a"), q("a"), q("b")}); at != "kprobe" || tgt != "a,b" {
		t.Errorf("three perf_event fds named %q %q, want kprobe a,b", at, tgt)
	}
}
