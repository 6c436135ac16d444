package profiler

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel profiler profiler.bpf.c -- -I../include
