// Package ktest holds bpfleet's kernel tests: built as one static test
// binary per arch and run by test/kernels inside real kernels under qemu, and
// runnable on the host, where each test skips with the reason the kernel
// gave for what it refuses.
package ktest

//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 ktest ktest.bpf.c -- -I../../../probes/include
//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 ktestloop ktestloop.bpf.c -- -I../../../probes/include
//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 kinterrupt kinterrupt.bpf.c -- -I../../../probes/include
