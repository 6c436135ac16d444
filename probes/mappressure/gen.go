package mappressure

//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target bpfel mappressure mappressure.bpf.c -- -I../include
