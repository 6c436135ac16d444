package progstats

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel progstats progstats.bpf.c -- -I../include
