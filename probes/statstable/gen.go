package statstable

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel statstable statstable.bpf.c -- -I../include
