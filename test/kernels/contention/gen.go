// Package contention holds the kernel-matrix tests of misses that are not
// recursion (ARCHITECTURE.md, "Misses that are not recursion"): two threads
// on one CPU trigger the same program while one of them is inside it,
// blocked (a sleepable program faulting on a userfaultfd page) or preempted
// (a trampoline program preempted by a SCHED_FIFO thread on a preemptible
// kernel). The kernel's per-CPU recursion guard counts the second thread's
// trigger as a recursion miss though nothing recursed; the tests hold the
// kernel's count, bpfleet's count and bpfleet's miss kind against the
// number of overlapping triggers. Built and run by test/kernels inside the
// matrix VMs; on the host (which refuses trampoline programs) they skip
// with the kernel's answer.
package contention

//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 contention contention.bpf.c -- -I../../../probes/include
