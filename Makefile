# KERNELS selects matrix entries (comma separated; default all):
#   make test-kernels KERNELS=sid-arm64
# KERNEL_FLAGS passes more harness flags, e.g. KERNEL_FLAGS="-cmd 'bpfleet probe -o json'".
KERNELS ?=
KERNEL_FLAGS ?=

.PHONY: test-kernels
test-kernels:
	go run ./test/kernels -kernels "$(KERNELS)" $(KERNEL_FLAGS)
