// Package refuse tells the kernel refusing a BPF iterator (a capability
// this kernel lacks) from other failures, for the iterator loaders in
// probes/.
package refuse

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// errnoENOTSUPP is the kernel-internal ENOTSUPP (524) that bpf() can leak.
const errnoENOTSUPP = syscall.Errno(524)

// Iterator marks the kernel saying no to an iterator program as
// ebpf.ErrNotSupported, keeping its reason; target names the iterator
// ("bpf_prog", "task_file") for the message. Other errors (EPERM, EBADF,
// ...) are not a kernel capability and are returned as they are.
func Iterator(err error, target string) error {
	var verr *ebpf.VerifierError
	switch {
	case errors.Is(err, ebpf.ErrNotSupported):
		return err
	case errors.Is(err, btf.ErrNotFound), errors.Is(err, btf.ErrNotSupported):
		return fmt.Errorf("%w: kernel BTF has no %s iterator target: %w", ebpf.ErrNotSupported, target, err)
	case errors.As(err, &verr) && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EACCES)):
		// The verifier refusing a CO-RE read or the target on this kernel.
		return fmt.Errorf("%w: verifier rejected the iterator: %w", ebpf.ErrNotSupported, err)
	case errors.Is(err, unix.EINVAL), errors.Is(err, errnoENOTSUPP), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: %w", ebpf.ErrNotSupported, err)
	}
	return err
}
