#!/usr/bin/env bash
# Installs what bpfleet's build and tests need on a Debian machine, as root.
# Idempotent: each step checks before it acts, so a second run is fast.
set -euo pipefail

# runc, the CNI plugins (bridge, host-local, loopback), iproute2 and
# util-linux (unshare, nsenter) are for test/node's real kubelet node.
# clang-14 and llvm-14 (llvm-strip-14) by version: every gen.go calls bpf2go
# with -cc clang-14 -strip llvm-strip-14, so the committed BPF objects are
# what bookworm's clang 14 makes and another default clang cannot change
# them (scripts/test.sh regenerates and diffs them). bpf2go takes the
# compiler only from its flags or $BPF2GO_CC, and an environment variable
# would pin nothing for a bare `go generate`, hence the version in each gen.go.
need_pkgs=(clang-14 llvm-14 libbpf-dev bpftool qemu-system-x86 qemu-system-arm cpio tmux \
           debian-archive-keyring ca-certificates procps iproute2 util-linux \
           runc containernetworking-plugins)
missing=()
for p in "${need_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# QEMU 7.2 (bookworm's) runs stale translations after a guest kernel patches
# its own text under multi-threaded TCG: x86 guests die of "Oops: int3" at a
# site whose bytes are already the patched nop (test/kernels/README.md, "Retries").
# On bookworm take QEMU from bookworm-backports; later Debian releases ship a
# newer QEMU themselves.
qemu_major=$(qemu-system-x86_64 --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\).*/\1/p')
. /etc/os-release
if [ "${qemu_major:-0}" -lt 8 ] && [ "${VERSION_CODENAME:-}" = bookworm ]; then
  echo "install-deps: QEMU ${qemu_major:-none} is too old for the kernel matrix; installing QEMU from bookworm-backports"
  export DEBIAN_FRONTEND=noninteractive
  cat >/etc/apt/sources.list.d/bpfleet-bookworm-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 qemu-system-arm >/dev/null
  qemu-system-x86_64 --version | head -1
fi

# bpffs and tracefs: the agent and the tests expect them where the kernel documents them.
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf || echo "install-deps: cannot mount bpffs at /sys/fs/bpf" >&2
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing || echo "install-deps: cannot mount tracefs at /sys/kernel/tracing" >&2
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
echo "install-deps: ok"
