package progiter

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel progiter progiter.bpf.c -- -I../include
