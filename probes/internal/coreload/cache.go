package coreload

// The cache file of one program's CO-RE result against one kernel build, and
// the load that reads it before falling back to kernel BTF.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// ReadCache reads a cache file, which must be for key.
func ReadCache(path, key string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Result
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("cache %s: %w", path, err)
	}
	if c.Key != key {
		return nil, fmt.Errorf("cache %s is for another kernel", path)
	}
	return &c, nil
}

// WriteCache writes a cache file atomically.
func WriteCache(path string, c *Result) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".core-*")
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

// CachePath is p's cache file for key in dir.
func CachePath(dir string, p *Program, key string) string {
	return filepath.Join(dir, p.Name+"-"+key[:32]+".json")
}

// Cached says whether dir holds a cached result of p (only its Name and
// Object are read) for the running kernel: a load that would skip kernel
// BTF.
func Cached(p *Program, dir string) bool {
	if dir == "" {
		return false
	}
	key, err := KernelKey(p.Object)
	if err != nil {
		return false
	}
	_, err = ReadCache(CachePath(dir, p, key), key)
	return err == nil
}

// Object is one iterator object of probes/: what its loader, Cached and
// Warm need to name its Program.
type Object struct {
	Name   string // Program.Name
	Bytes  []byte // the ELF object (Program.Object)
	Spec   func() (*ebpf.CollectionSpec, error)
	Prog   string // the iterator program in the spec
	Target string // Program.Target
}

// Program reads o's spec and names the Program to relocate of it.
func (o Object) Program() (*ebpf.CollectionSpec, *Program, error) {
	spec, err := o.Spec()
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s iterator spec: %w", o.Target, err)
	}
	return spec, &Program{Name: o.Name, Object: o.Bytes, Insns: spec.Programs[o.Prog].Instructions, Target: o.Target}, nil
}

// Cached says whether dir holds o's CO-RE result for the running kernel.
func (o Object) Cached(dir string) bool {
	return Cached(&Program{Name: o.Name, Object: o.Bytes}, dir)
}

// Warm writes o's cache file in dir for the running kernel where there is
// none, without loading o: for a one-shot command that read by syscall
// because the cache was cold, so that the next one starts warm. It parses
// kernel BTF (tens of ms); a cache already there costs a stat and a read.
func (o Object) Warm(dir string) error {
	if dir == "" || o.Cached(dir) {
		return nil
	}
	_, p, err := o.Program()
	if err != nil {
		return err
	}
	key, err := KernelKey(p.Object)
	if err != nil {
		return err
	}
	path := CachePath(dir, p, key)
	c, err := Relocate(p, key)
	if err != nil {
		return err
	}
	if err := WriteCache(path, c); err != nil {
		return fmt.Errorf("writing CO-RE cache: %w", err)
	}
	return nil
}

// Load relocates p against the running kernel, with the result cached in
// dir ("" for no cache; internal/config chooses it, probes read no
// environment), and calls load with it. A cached result that load
// refuses is dropped and p relocated again from kernel BTF.
func Load[T any](p *Program, dir string, load func(*Result) (T, error)) (T, LoadInfo, error) {
	var li LoadInfo
	var zero T
	key, err := KernelKey(p.Object)
	if err != nil {
		return zero, li, err
	}
	if dir != "" {
		li.CachePath = CachePath(dir, p, key)
		c, err := ReadCache(li.CachePath, key)
		if err == nil {
			v, err := load(c)
			if err == nil {
				li.Cached = true
				return v, li, nil
			}
			li.CacheErr = fmt.Errorf("cached CO-RE result refused, relocating again: %w", err)
			os.Remove(li.CachePath)
		} else if !errors.Is(err, os.ErrNotExist) {
			li.CacheErr = err
		}
	}
	c, err := Relocate(p, key)
	if err != nil {
		return zero, li, err
	}
	v, err := load(c)
	if err != nil {
		return zero, li, err
	}
	if li.CachePath != "" {
		if err := WriteCache(li.CachePath, c); err != nil {
			werr := fmt.Errorf("writing CO-RE cache: %w", err)
			if li.CacheErr != nil {
				// One line, not errors.Join's two: the agent shows it as
				// one Degraded line.
				werr = fmt.Errorf("%w; %w", li.CacheErr, werr)
			}
			li.CacheErr = werr
			li.CachePath = ""
		}
	}
	return v, li, nil
}
