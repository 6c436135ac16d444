// Command aaprofile prints the AppArmor profile containerd loads for its
// containers (cri-containerd.apparmor.d unless a name is given), generated
// by containerd's own code where it runs: the profile depends on the
// machine (which of /etc/apparmor.d's abi, tunables and abstractions exist,
// the profile of the process that generates it). It is its own module so
// that containerd's requirements stay out of bpfleet's go.mod; the
// containerd version is the one scripts/build-backends.sh builds.
package main

import (
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/contrib/apparmor"
)

func main() {
	name := "cri-containerd.apparmor.d"
	if len(os.Args) > 1 {
		name = os.Args[1]
	}
	p, err := apparmor.DumpDefaultProfile(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "aaprofile:", err)
		os.Exit(1)
	}
	fmt.Print(p)
}
