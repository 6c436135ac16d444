package misswatch

//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target bpfel misswatch misswatch.bpf.c -- -I../include
//go:generate go tool bpf2go -tags linux -cc clang-14 -strip llvm-strip-14 -cflags "-O2 -g -Wall -Werror" -target bpfel progranges ranges.bpf.c -- -I../include
