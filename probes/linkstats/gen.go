package linkstats

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel linkstats linkstats.bpf.c -- -I../include
