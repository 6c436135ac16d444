package stats

import (
	"fmt"
	"io"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// statsHolder holds a BPF_ENABLE_STATS(BPF_STATS_RUN_TIME) fd. The kernel
// counts holders: stats stay on while any fd is open or the sysctl is 1, so
// the agent never writes the sysctl (which would switch stats off under
// another tool when we stop) and a killed agent leaves nothing behind, since
// the kernel drops the fd with the process.
type statsHolder struct {
	fd  io.Closer
	err error
}

func enableStats() *statsHolder {
	fd, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return &statsHolder{err: fmt.Errorf("enabling BPF run-time stats (BPF_ENABLE_STATS needs CAP_SYS_ADMIN, Linux 5.8+): %w", err)}
	}
	return &statsHolder{fd: fd}
}

func (s *statsHolder) close() {
	if s != nil && s.fd != nil {
		s.fd.Close()
		s.fd = nil
	}
}
