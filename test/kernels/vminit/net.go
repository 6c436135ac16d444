package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// setupNet loads the NIC modules netFile lists and gives lo and eth0 their
// addresses. eth0 needs no route: the host (qemu's user-mode gateway) is on
// its subnet, and the tests reach nothing else.
func setupNet(conf string) error {
	var prefix netip.Prefix
	var mods []string
	for _, line := range strings.Split(conf, "\n") {
		key, val, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch key {
		case "addr":
			p, err := netip.ParsePrefix(val)
			if err != nil {
				return fmt.Errorf("parsing %s: %w", netFile, err)
			}
			prefix = p
		case "modules":
			mods = strings.Fields(val)
		}
	}
	for _, m := range mods {
		if err := loadModule(m); err != nil {
			return err
		}
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	if err := ifUp(fd, "lo"); err != nil {
		return err
	}
	// Binding the driver to the PCI device may finish after the module's
	// init returns (asynchronous probing).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat("/sys/class/net/eth0"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			ifs, _ := os.ReadDir("/sys/class/net")
			var names []string
			for _, i := range ifs {
				names = append(names, i.Name())
			}
			return fmt.Errorf("no eth0 10s after loading %v (interfaces: %v)", mods, names)
		}
		time.Sleep(50 * time.Millisecond)
	}
	bits := uint32(0xffffffff) << (32 - prefix.Bits())
	mask := [4]byte{byte(bits >> 24), byte(bits >> 16), byte(bits >> 8), byte(bits)}
	for _, set := range []struct {
		req  uint
		addr [4]byte
	}{{unix.SIOCSIFADDR, prefix.Addr().As4()}, {unix.SIOCSIFNETMASK, mask}} {
		ifr, err := unix.NewIfreq("eth0")
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(set.addr[:]); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, set.req, ifr); err != nil {
			return fmt.Errorf("setting eth0's address %s: %w", prefix, err)
		}
	}
	return ifUp(fd, "eth0")
}

// loadModule loads one module file. Compressed modules are handed to the
// kernel as they are (MODULE_INIT_COMPRESSED_FILE: Debian's kernels
// decompress them, CONFIG_MODULE_DECOMPRESS).
func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("loading module: %w", err)
	}
	defer f.Close()
	flags := 0
	if !strings.HasSuffix(path, ".ko") {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	if err := unix.FinitModule(int(f.Fd()), "", flags); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading module %s: %w", path, err)
	}
	return nil
}

func ifUp(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading %s's flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("setting %s up: %w", name, err)
	}
	return nil
}
