package agent

import (
	"slices"
	"strings"

	"github.com/bpfleet/bpfleet/internal/sysfile"
)

// FeatureConfinement names the Degraded line that ties the features lost
// under an enforcing AppArmor profile to that profile.
const FeatureConfinement = "confinement"

// appArmorRefusable are the features whose loss an AppArmor profile can
// cause: each rests on a file or namespace operation AppArmor mediates
// (other processes' /proc/PID entries are a ptrace read, setns and bpffs
// writes are file rules). bpf() itself and the BPF iterators are not
// mediated; test/kernels/confine measures which containerd's default
// profile refuses.
var appArmorRefusable = []string{
	FeatureOwners, FeaturePins, FeatureOwnerIterator, FeatureCgroupAttach,
	FeatureNetdevAttach, FeatureNetdevNames, FeatureNetdevPods,
	FeatureMissWatch, FeatureMissSymbols, FeatureCoreCache,
}

// appArmorLabel is the agent's own AppArmor label as the kernel shows it,
// "" when AppArmor is not the agent's LSM. AppArmor's own attr directory
// (Linux 5.8+) first: attr/current belongs to whichever LSM is the major
// one, and an SELinux context there is no AppArmor label.
func appArmorLabel() string {
	for _, p := range []string{"/proc/self/attr/apparmor/current", "/proc/self/attr/current"} {
		b, err := sysfile.Read(p)
		if err != nil {
			continue
		}
		l := strings.TrimRight(string(b), "\x00\n")
		if _, _, ok := parseAppArmorLabel(l); ok {
			return l
		}
	}
	return ""
}

// parseAppArmorLabel splits an AppArmor label: "unconfined", or
// "<profile> (<mode>)" with mode enforce, complain, kill, unconfined or
// prompt. ok is false for anything else (an SELinux context).
func parseAppArmorLabel(label string) (profile, mode string, ok bool) {
	if label == "unconfined" {
		return label, "", true
	}
	i := strings.LastIndex(label, " (")
	if i <= 0 || !strings.HasSuffix(label, ")") {
		return "", "", false
	}
	profile, mode = label[:i], label[i+2:len(label)-1]
	if mode == "" || strings.ContainsAny(mode, " ()") {
		return "", "", false
	}
	return profile, mode, true
}

// enforcing says the AppArmor label is a profile that refuses (enforce or
// kill mode), not one that only logs or none.
func enforcing(label string) bool {
	_, mode, ok := parseAppArmorLabel(label)
	return ok && (mode == "enforce" || mode == "kill")
}

// confinementLine says which of the lost features (the Degraded lines'
// feature names) the agent's AppArmor profile can refuse, "" when the
// profile refuses nothing (unconfined, complain mode) or nothing it can
// refuse was lost.
func confinementLine(label string, lost []string) string {
	if !enforcing(label) {
		return ""
	}
	profile, mode, _ := parseAppArmorLabel(label)
	var refused []string
	for _, f := range appArmorRefusable {
		if slices.Contains(lost, f) {
			refused = append(refused, f)
		}
	}
	if len(refused) == 0 {
		return ""
	}
	return "AppArmor profile " + profile + " (" + mode + ") confines the agent, and what it refuses is lost: " +
		strings.Join(refused, ", ") +
		"; run the agent unconfined (the chart's appArmorProfile.type: Unconfined; RuntimeDefault is the runtime's profile)"
}

// AppArmor is the agent's AppArmor label ("unconfined", "<profile>
// (enforce)"), "" when AppArmor is not its LSM.
func (a *Agent) AppArmor() string { return a.apparmor }
