// Command pause is the sandbox process of the node test's pods, in the
// place of Kubernetes' pause image (registry.k8s.io is out of reach): it
// holds the pod's namespaces while its containers come and go, reaps the
// children reparented to it when it is the pid 1 of a pod that shares its
// pid namespace, and exits 0 on SIGTERM or SIGINT. Static (CGO_ENABLED=0):
// its image holds nothing else (test/testimage.Pause).
package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	reap() // children that exited before Notify, whose SIGCHLD is lost
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap waits for every exited child: signals coalesce, so one SIGCHLD may
// stand for several.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
