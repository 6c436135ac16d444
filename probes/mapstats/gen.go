package mapstats

//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target bpfel mapstats mapstats.bpf.c -- -I../include
