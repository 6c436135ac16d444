package taskfile

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel taskfile taskfile.bpf.c -- -I../include
