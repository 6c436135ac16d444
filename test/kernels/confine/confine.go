// Package confine measures what containerd's default AppArmor profile
// (cri-containerd.apparmor.d, the profile a pod gets with appArmorProfile
// RuntimeDefault on a node where AppArmor is enabled) takes from the agent.
// In a kernel-matrix guest with AppArmor active it generates the profile
// with containerd's own code (aaprofile), loads it with Debian's
// apparmor_parser, and runs the real bpfleet binary twice, in a network
// namespace of its own as the chart's pod is: unconfined and under the
// profile. It logs each feature's result in both runs and fails when the
// confined agent does not name the profile and every feature it lost.
package confine

// Profile is the name containerd gives its default profile.
const Profile = "cri-containerd.apparmor.d"
