package features

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel features features.bpf.c -- -I../include
