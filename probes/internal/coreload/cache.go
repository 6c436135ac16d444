package coreload

// The cache file of one program's CO-RE result against one kernel build, and
// the load that reads it before falling back to kernel BTF.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// Warm writes p's cache file in dir for the running kernel where there is
// none, without loading p: for a one-shot command that read by syscall
// because the cache was cold, so that the next one starts warm. It parses
// kernel BTF (tens of ms); a cache already there costs a stat and a read.
func Warm(p *Program, dir string) error {
	if dir == "" {
		return nil
	}
	key, err := KernelKey(p.Object)
	if err != nil {
		return err
	}
	path := CachePath(dir, p, key)
	if _, err := ReadCache(path, key); err == nil {
		return nil
	}
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
