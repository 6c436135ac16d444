package fleetsim

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/bpfleet/bpfleet/agent"
)

// The recordings: one real snapshot per kernel, as TestRecord took it
// (README.md says how, on the host and in the kernel matrix's guests).
//
//go:embed testdata/*.json.gz
var recordings embed.FS

// Recordings lists the recorded kernel releases, in order.
func Recordings() []string {
	ents, _ := recordings.ReadDir("testdata")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json.gz"); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Recording is the snapshot recorded on one kernel.
func Recording(release string) (*agent.Snapshot, error) {
	data, err := recordings.ReadFile(path.Join("testdata", release+".json.gz"))
	if err != nil {
		return nil, fmt.Errorf("fleetsim: no recording of kernel %q (have %s)", release, strings.Join(Recordings(), ", "))
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("fleetsim: recording %s: %w", release, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("fleetsim: recording %s: %w", release, err)
	}
	var s agent.Snapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("fleetsim: recording %s: %w", release, err)
	}
	return &s, nil
}

// Role is a part of a node's program set: which recorded programs a node
// runs, and how many copies.
type Role string

const (
	// RoleBase: programs nobody else claims (a socket filter, an
	// unattached program), once per node. Every node has them.
	RoleBase Role = "base"
	// RoleCNI: a CNI's per-endpoint programs (tc, tcx, XDP on the pod's
	// veth, cgroup_skb and cgroup_sock on its cgroup), one set per pod,
	// held by the CNI's agent (DaemonSet kube-system/cni-agent).
	RoleCNI Role = "cni"
	// RoleRunc: runc's cgroup_device program, one per pod, held by no
	// process (owned by the pod).
	RoleRunc Role = "runc"
	// RoleSecurity: a security agent's tracing programs (fentry, fexit,
	// lsm, kprobes, tracepoints, uprobes, and the recursion canary with
	// its real misses), once per node, held by DaemonSet
	// security/secagent.
	RoleSecurity Role = "security"
)

// roleOf says which role a recorded program plays, by its attach type.
func roleOf(p *agent.ProgramStat) Role {
	switch p.AttachType {
	case "tc_ingress", "tc_egress", "tcx_ingress", "tcx_egress", "xdp",
		"cgroup_inet_ingress", "cgroup_inet_egress", "cgroup_inet_sock_create":
		return RoleCNI
	case "cgroup_device":
		return RoleRunc
	case "fentry", "fexit", "fmod_ret", "fentry.s", "lsm", "tp_btf", "raw_tp",
		"tracepoint", "kprobe", "kretprobe", "kprobe.multi", "kretprobe.multi", "uprobe", "uretprobe":
		return RoleSecurity
	}
	return RoleBase
}

// templates are a recording's programs by role, one per distinct (name,
// type, attach type): the recorder ran two pods, a node here runs as many
// as its pool says.
func templates(s *agent.Snapshot) map[Role][]*agent.ProgramStat {
	out := map[Role][]*agent.ProgramStat{}
	seen := map[string]bool{}
	for _, p := range s.Programs {
		k := p.Name + "\x00" + p.Type + "\x00" + p.AttachType
		if seen[k] {
			continue
		}
		seen[k] = true
		r := roleOf(p)
		out[r] = append(out[r], p)
	}
	return out
}
