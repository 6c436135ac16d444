package catalog

//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 catalog catalog.bpf.c -- -I../include
