package statstable

//go:generate go tool bpf2go -tags linux -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 statstable statstable.bpf.c -- -I../include
