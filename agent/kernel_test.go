package agent

import (
	"os"
	"strings"
	"testing"
)

func TestPreemptModel(t *testing.T) {
	cases := []struct {
		name, version, config, debug string
		model, mode, source          string
	}{
		{"rt from uname", "#1 SMP PREEMPT_RT Debian 7.2", "", "", "PREEMPT_RT", "", "uname"},
		{"rt with its dynamic mode", "#1 SMP PREEMPT_RT Debian 7.2", "", "full (lazy)\n", "PREEMPT_RT", "lazy", "uname+debugfs"},
		{"rt from config beats uname", "#1 SMP", "CONFIG_X=y\nCONFIG_PREEMPT_RT=y\n", "", "PREEMPT_RT", "", "config"},
		{"dynamic with mode", "#1 SMP PREEMPT_DYNAMIC", "", "none voluntary (full) lazy\n", "PREEMPT_DYNAMIC", "full", "uname+debugfs"},
		{"dynamic without debugfs", "#1 SMP PREEMPT_DYNAMIC @0", "", "", "PREEMPT_DYNAMIC", "", "uname"},
		{"voluntary from config", "#1 SMP Debian", "# c\nCONFIG_PREEMPT_VOLUNTARY=y\n# CONFIG_PREEMPT is not set\n", "", "PREEMPT_VOLUNTARY", "", "config"},
		{"none from config", "#1 SMP", "CONFIG_PREEMPT_NONE=y\n", "", "PREEMPT_NONE", "", "config"},
		{"plain preempt in uname", "#1 SMP PREEMPT Tue", "", "", "PREEMPT", "", "uname"},
		{"nothing known", "#1 SMP Debian", "", "", "unknown", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, mode, src := preemptModel(c.version, []byte(c.config), []byte(c.debug))
			if m != c.model || mode != c.mode || src != c.source {
				t.Errorf("got %q %q %q, want %q %q %q", m, mode, src, c.model, c.mode, c.source)
			}
		})
	}
}

func TestMissKind(t *testing.T) {
	yes, no := true, false
	rt := KernelInfo{Preempt: "PREEMPT_RT"}
	vol := KernelInfo{Preempt: "PREEMPT_VOLUNTARY"}
	full := KernelInfo{Preempt: "PREEMPT_DYNAMIC", PreemptMode: "full"}
	dynNone := KernelInfo{Preempt: "PREEMPT_DYNAMIC", PreemptMode: "none"}
	dynUnknown := KernelInfo{Preempt: "PREEMPT_DYNAMIC"}
	unk := KernelInfo{Preempt: "unknown"}
	cases := []struct {
		name string
		p    Program
		k    KernelInfo
		want string
	}{
		{"sleepable anywhere", Program{AttachType: "fentry.s", Sleepable: &yes}, vol, MissKindContentionPossible},
		{"raw_tp on RT", Program{AttachType: "raw_tp", Sleepable: &no}, rt, MissKindContentionPossible},
		{"fentry on voluntary", Program{AttachType: "fentry", Sleepable: &no}, vol, MissKindRecursion},
		{"fentry on dynamic full", Program{AttachType: "fentry", Sleepable: &no}, full, MissKindContentionPossible},
		{"fentry on dynamic none", Program{AttachType: "fentry", Sleepable: &no}, dynNone, MissKindRecursion},
		{"fentry on dynamic, mode unreadable", Program{AttachType: "fentry", Sleepable: &no}, dynUnknown, MissKindUnknown},
		{"tp_btf on dynamic, mode unreadable", Program{AttachType: "tp_btf", Sleepable: &no}, dynUnknown, MissKindUnknown},
		{"tp_btf on dynamic full (measured preemptible on 7.2)", Program{AttachType: "tp_btf", Sleepable: &no}, full, MissKindContentionPossible},
		{"raw_tp on voluntary", Program{AttachType: "raw_tp", Sleepable: &no}, vol, MissKindRecursion},
		{"kprobe on dynamic full (runs with preemption off)", Program{AttachType: "kprobe"}, full, MissKindRecursion},
		{"fentry with unknown sleepable", Program{AttachType: "fentry"}, vol, MissKindUnknown},
		{"unknown preemption", Program{AttachType: "raw_tp", Sleepable: &no}, unk, MissKindUnknown},
		{"iter program has no guard", Program{Type: "tracing", AttachType: "iter", Sleepable: &no}, vol, MissKindNone},
		{"xdp has no guard", Program{Type: "xdp", AttachType: "xdp"}, rt, MissKindNone},
		{"cgroup skb has no guard", Program{Type: "cgroup_skb", AttachType: "cgroup_inet_ingress"}, vol, MissKindNone},
		{"unattached socket filter", Program{Type: "socket_filter", AttachType: Unattached}, vol, MissKindNone},
		{"unattached raw_tracepoint by its type", Program{Type: "raw_tracepoint", AttachType: Unattached, Sleepable: &no}, vol, MissKindRecursion},
		{"tracing guess with ?", Program{Type: "tracing", AttachType: "fentry?"}, vol, MissKindUnknown},
		{"uprobe.multi", Program{Type: "kprobe", AttachType: "uprobe.multi"}, vol, MissKindRecursion},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := missKind(&c.p, &c.k); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestCPUModel(t *testing.T) {
	x86 := "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n"
	arm := "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"
	if got := cpuModel([]byte(x86)); got != "Intel(R) Xeon(R) CPU @ 2.20GHz" {
		t.Errorf("x86: %q", got)
	}
	if got := cpuModel([]byte(arm)); got != "implementer 0x41 part 0xd4f" {
		t.Errorf("arm64: %q", got)
	}
}

// TestCPUModelPrefix: ReadKernelInfo stops reading cpuinfo at the first
// whole model name line (hasModelName); cpuModel of any prefix it stops at
// is cpuModel of the whole file, for x86 (model name per CPU), arm64 (none:
// read to the end) and a Raspberry Pi (one Model line after every CPU),
// and for this host's own /proc/cpuinfo.
func TestCPUModelPrefix(t *testing.T) {
	x86 := strings.Repeat("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nflags\t\t: fpu vme\n\n", 4)
	arm := "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd05\n\nprocessor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd0a\n\n"
	rpi := strings.Repeat("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n\n", 4) + "Hardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n"
	for name, full := range map[string]string{"x86": x86, "arm64": arm, "rpi": rpi} {
		want := cpuModel([]byte(full))
		stops := 0
		for n := range len(full) + 1 {
			prefix := []byte(full[:n])
			if !hasModelName(prefix) {
				continue
			}
			stops++
			if got := cpuModel(prefix); got != want {
				t.Errorf("%s: cpuModel of the %d-byte prefix it stops at = %q, whole file %q", name, n, got, want)
				break
			}
		}
		if name == "arm64" && stops != 0 {
			t.Errorf("arm64 (no model name line): stops early")
		}
	}
	whole, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	if k := ReadKernelInfo("/proc"); k.CPUModel != cpuModel(whole) {
		t.Errorf("ReadKernelInfo: CPU model %q, the whole /proc/cpuinfo says %q", k.CPUModel, cpuModel(whole))
	}
}
