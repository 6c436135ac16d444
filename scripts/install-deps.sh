#!/usr/bin/env bash
# Installs what bpfleet's build and tests need on a Debian machine, as root.
# Idempotent: each step checks before it acts, so a second run is fast.
set -euo pipefail

need_pkgs=(clang llvm libbpf-dev bpftool qemu-system-x86 qemu-system-arm cpio tmux \
           debian-archive-keyring ca-certificates procps)
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

# bpffs and tracefs: the agent and the tests expect them where the kernel documents them.
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf || echo "install-deps: cannot mount bpffs at /sys/fs/bpf" >&2
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing || echo "install-deps: cannot mount tracefs at /sys/kernel/tracing" >&2
mountpoint -q /sys/kernel/debug || mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || true
echo "install-deps: ok"
