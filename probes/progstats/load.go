package progstats

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// The iterator is loaded with bpf(BPF_PROG_LOAD) directly rather than
// through cilium/ebpf's loader: that one parses the whole vmlinux BTF for
// every load (to relocate CO-RE reads and find the iterator's attach
// target), 20–45 ms of a one-shot `bpfleet list` whose scan itself takes
// under a millisecond. Here the CO-RE result (the patched instructions and
// the attach BTF id) is computed from vmlinux BTF once per kernel build and
// kept in a cache file keyed by the kernel's identity; later loads only
// patch the instructions, create two small maps and run the verifier.

// coreCache is the cache file: what CO-RE against one kernel's BTF gave.
type coreCache struct {
	Key         string  `json:"key"`
	AttachBTFID uint32  `json:"attach_btf_id"`
	Patches     []patch `json:"patches"`
}

// patch is one relocated instruction, by its index in the program.
type patch struct {
	Index    int   `json:"i"`
	OpCode   uint8 `json:"op"`
	Dst      uint8 `json:"dst"`
	Src      uint8 `json:"src"`
	Offset   int16 `json:"off"`
	Constant int64 `json:"imm"`
}

// LoadInfo says how a load went, for callers that report or measure it.
type LoadInfo struct {
	// Cached is true when the CO-RE result came from the cache file.
	Cached bool
	// CachePath is the cache file used or written, "" when none.
	CachePath string
	// CacheErr says why the cache could not be read or written (the load
	// itself still succeeded), nil otherwise.
	CacheErr error
}

// DefaultCacheDir is where the CO-RE cache is kept: $BPFLEET_CACHE_DIR,
// else the user cache directory (/root/.cache/bpfleet for root).
func DefaultCacheDir() string {
	if d := os.Getenv("BPFLEET_CACHE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "bpfleet")
}

// kernelKey identifies the running kernel's BTF together with this
// program's object: the build id note (/sys/kernel/notes), uname and the
// size of /sys/kernel/btf/vmlinux. A new kernel build, or a new bpfleet
// with another program, makes another key.
func kernelKey() (string, error) {
	h := sha256.New()
	h.Write(_ProgstatsBytes)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	h.Write(u.Release[:])
	h.Write(u.Version[:])
	h.Write(u.Machine[:])
	notes, err := os.ReadFile("/sys/kernel/notes")
	if err != nil {
		return "", fmt.Errorf("reading kernel build id: %w", err)
	}
	h.Write(notes)
	fi, err := os.Stat("/sys/kernel/btf/vmlinux")
	if err != nil {
		return "", fmt.Errorf("%w: kernel has no BTF: %w", ebpf.ErrNotSupported, err)
	}
	fmt.Fprintf(h, "%d", fi.Size())
	return hex.EncodeToString(h.Sum(nil)), nil
}

// relocate computes the CO-RE patches and the attach target id from the
// kernel's BTF: the expensive step the cache saves.
func relocate(insns asm.Instructions, key string) (*coreCache, error) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("%w: loading kernel BTF: %w", ebpf.ErrNotSupported, err)
	}
	var fn *btf.Func
	if err := kernel.TypeByName("bpf_iter_bpf_prog", &fn); err != nil {
		return nil, fmt.Errorf("%w: kernel BTF has no bpf_prog iterator target: %w", ebpf.ErrNotSupported, err)
	}
	attachID, err := kernel.TypeID(fn)
	if err != nil {
		return nil, err
	}
	var relos []*btf.CORERelocation
	var at []int
	for i := range insns {
		if r := btf.CORERelocationMetadata(&insns[i]); r != nil {
			relos = append(relos, r)
			at = append(at, i)
		}
	}
	noLocalIDs := func(btf.Type) (btf.TypeID, error) { return 0, errors.New("no local type ids in this program") }
	fixups, err := btf.CORERelocate(relos, []*btf.Spec{kernel}, binary.LittleEndian, noLocalIDs)
	if err != nil {
		return nil, fmt.Errorf("%w: CO-RE against kernel BTF: %w", ebpf.ErrNotSupported, err)
	}
	c := &coreCache{Key: key, AttachBTFID: uint32(attachID)}
	for j, f := range fixups {
		ins := insns[at[j]]
		if err := f.Apply(&ins); err != nil {
			return nil, fmt.Errorf("%w: applying CO-RE fixup %d: %w", ebpf.ErrNotSupported, j, err)
		}
		c.Patches = append(c.Patches, patch{Index: at[j], OpCode: uint8(ins.OpCode), Dst: uint8(ins.Dst), Src: uint8(ins.Src), Offset: ins.Offset, Constant: ins.Constant})
	}
	return c, nil
}

// apply writes the patches into insns, after checking they are for this
// program: exactly its CO-RE instructions, no more and no less.
func (c *coreCache) apply(insns asm.Instructions) error {
	n := 0
	for i := range insns {
		if btf.CORERelocationMetadata(&insns[i]) != nil {
			if n >= len(c.Patches) || c.Patches[n].Index != i {
				return fmt.Errorf("cached CO-RE patches do not match the program at instruction %d", i)
			}
			n++
		}
	}
	if n != len(c.Patches) {
		return fmt.Errorf("cached CO-RE patches: %d for %d relocations", len(c.Patches), n)
	}
	for _, p := range c.Patches {
		ins := &insns[p.Index]
		ins.OpCode, ins.Dst, ins.Src, ins.Offset, ins.Constant = asm.OpCode(p.OpCode), asm.Register(p.Dst), asm.Register(p.Src), p.Offset, p.Constant
	}
	return nil
}

func readCache(path, key string) (*coreCache, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c coreCache
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("cache %s: %w", path, err)
	}
	if c.Key != key {
		return nil, fmt.Errorf("cache %s is for another kernel", path)
	}
	return &c, nil
}

func writeCache(path string, c *coreCache) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".progstats-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path) // atomic: a reader sees the old file or the whole new one
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// LoadCached loads and attaches the iterator for cpus possible CPUs, with
// the CO-RE result cached in dir ("" for no cache). A cache entry the
// verifier refuses is dropped and the load retried from kernel BTF.
func LoadCached(cpus int, dir string) (*Iter, LoadInfo, error) {
	var li LoadInfo
	spec, err := loadProgstats()
	if err != nil {
		return nil, li, fmt.Errorf("reading bpf_prog stats iterator spec: %w", err)
	}
	key, err := kernelKey()
	if err != nil {
		return nil, li, err
	}
	if dir != "" {
		li.CachePath = filepath.Join(dir, "progstats-"+key[:32]+".json")
		c, err := readCache(li.CachePath, key)
		if err == nil {
			it, err := load(spec, c, cpus)
			if err == nil {
				li.Cached = true
				return it, li, nil
			}
			li.CacheErr = fmt.Errorf("cached CO-RE result refused, relocating again: %w", err)
			os.Remove(li.CachePath)
		} else if !errors.Is(err, os.ErrNotExist) {
			li.CacheErr = err
		}
	}
	c, err := relocate(spec.Programs["dump_prog"].Instructions, key)
	if err != nil {
		return nil, li, err
	}
	it, err := load(spec, c, cpus)
	if err != nil {
		return nil, li, err
	}
	if li.CachePath != "" {
		if err := writeCache(li.CachePath, c); err != nil {
			li.CacheErr = errors.Join(li.CacheErr, fmt.Errorf("writing CO-RE cache: %w", err))
			li.CachePath = ""
		}
	}
	return it, li, nil
}

// load creates the maps, loads the patched program and attaches it.
func load(spec *ebpf.CollectionSpec, c *coreCache, cpus int) (_ *Iter, err error) {
	ps := spec.Programs["dump_prog"]
	insns := ps.Copy().Instructions
	if err := c.apply(insns); err != nil {
		return nil, err
	}

	it := &Iter{buf: make([]byte, bufSize), names: newNames(), cpus: cpus}
	defer func() {
		if err != nil {
			it.Close()
		}
	}()
	rodata := spec.Maps[".rodata"].Copy()
	v := spec.Variables["nr_cpus"]
	data, ok := rodata.Contents[0].Value.([]byte)
	if !ok || int(v.Offset)+4 > len(data) {
		return nil, errors.New("progstats: unexpected .rodata layout")
	}
	data = bytes.Clone(data)
	binary.LittleEndian.PutUint32(data[v.Offset:], uint32(cpus))
	rodata.Contents[0].Value = data
	for name, ms := range map[string]*ebpf.MapSpec{".rodata": rodata, "pcpu": spec.Maps["pcpu"], "known_max_id": spec.Maps["known_max_id"], "offs": spec.Maps["offs"]} {
		// Without key/value BTF: none of these maps needs it, and each
		// type would cost a BTF_LOAD.
		ms = ms.Copy()
		ms.Key, ms.Value = nil, nil
		m, err := ebpf.NewMap(ms)
		if err != nil {
			return nil, fmt.Errorf("creating map %s: %w", name, err)
		}
		it.maps = append(it.maps, m)
		if name == "known_max_id" {
			it.known = m
		}
		if err := insns.AssociateMap(name, m); err != nil && !errors.Is(err, asm.ErrUnreferencedSymbol) {
			return nil, fmt.Errorf("map %s: %w", name, err)
		}
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		return nil, fmt.Errorf("marshaling iterator: %w", err)
	}
	fd, err := progLoad(buf.Bytes(), c.AttachBTFID)
	if err != nil {
		return nil, fmt.Errorf("loading iter/bpf_prog stats: %w", err)
	}
	it.prog, err = ebpf.NewProgramFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wrapping iterator program: %w", err)
	}
	return it, it.attach()
}

// Constants of union bpf_attr for BPF_PROG_LOAD (include/uapi/linux/bpf.h).
const (
	cmdProgLoad         = 5  // BPF_PROG_LOAD
	progTypeTracing     = 26 // BPF_PROG_TYPE_TRACING
	attachTraceIter     = 28 // BPF_TRACE_ITER
	errnoENOTSUPP       = 524
	verifierLogSize     = 1 << 20
	verifierLogTailRows = 3
)

// progLoadAttr is the prefix of union bpf_attr's BPF_PROG_LOAD member up
// to attach_btf_obj_fd (Linux 5.11); a kernel accepts a shorter attr.
type progLoadAttr struct {
	ProgType           uint32
	InsnCnt            uint32
	Insns              uint64
	License            uint64
	LogLevel           uint32
	LogSize            uint32
	LogBuf             uint64
	KernVersion        uint32
	ProgFlags          uint32
	ProgName           [16]byte
	ProgIfindex        uint32
	ExpectedAttachType uint32
	ProgBTFFD          uint32
	FuncInfoRecSize    uint32
	FuncInfo           uint64
	FuncInfoCnt        uint32
	LineInfoRecSize    uint32
	LineInfo           uint64
	LineInfoCnt        uint32
	AttachBTFID        uint32
	AttachBTFObjFD     uint32
	_                  uint32
}

// progLoad loads the iterator program; on a verifier refusal it loads
// again with a log and returns the log's last lines, which name what this
// kernel lacks (an unknown helper, a refused access).
func progLoad(insns []byte, attachBTFID uint32) (int, error) {
	license := []byte("GPL\x00")
	attr := progLoadAttr{
		ProgType:           progTypeTracing,
		InsnCnt:            uint32(len(insns) / asm.InstructionSize),
		Insns:              uint64(uintptr(unsafe.Pointer(&insns[0]))),
		License:            uint64(uintptr(unsafe.Pointer(&license[0]))),
		ExpectedAttachType: attachTraceIter,
		AttachBTFID:        attachBTFID,
	}
	copy(attr.ProgName[:], "dump_prog")
	fd, err := bpfProgLoad(&attr)
	if err == nil {
		runtime.KeepAlive(insns)
		return fd, nil
	}
	if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EINVAL) {
		if errors.Is(err, unix.Errno(errnoENOTSUPP)) || errors.Is(err, unix.EOPNOTSUPP) {
			return -1, fmt.Errorf("%w: %w", ebpf.ErrNotSupported, err)
		}
		return -1, err
	}
	log := make([]byte, verifierLogSize)
	attr.LogLevel, attr.LogSize, attr.LogBuf = 1, uint32(len(log)), uint64(uintptr(unsafe.Pointer(&log[0])))
	if fd, err2 := bpfProgLoad(&attr); err2 == nil {
		unix.Close(fd) // loads with a log but not without: keep the first error
	}
	runtime.KeepAlive(insns)
	runtime.KeepAlive(license)
	lines := strings.Split(strings.TrimRight(unix.ByteSliceToString(log), "\n"), "\n")
	tail := strings.Join(lines[max(0, len(lines)-verifierLogTailRows):], " | ")
	return -1, fmt.Errorf("%w: verifier rejected the iterator: %w: %s", ebpf.ErrNotSupported, err, tail)
}

func bpfProgLoad(attr *progLoadAttr) (int, error) {
	for {
		fd, _, errno := unix.Syscall(unix.SYS_BPF, cmdProgLoad, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
		runtime.KeepAlive(attr)
		if errno == unix.EAGAIN || errno == unix.EINTR {
			continue // the verifier was interrupted; the kernel asks for a retry
		}
		if errno != 0 {
			return -1, errno
		}
		return int(fd), nil
	}
}
