package mapstats

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
)

// readSyscalls is Read without the iterator: BPF_MAP_GET_NEXT_ID, then
// for each id an fd (GET_FD_BY_ID) and bpf_map_info (OBJ_GET_INFO_BY_FD,
// with cilium/ebpf's read of the fdinfo for memlock). The kernel gives no
// element count this way; Options.CountBound walks the keys instead.
func (r *Reader) readSyscalls() error {
	r.maps = r.maps[:0]
	why := "no iterator: " + r.source.Reason
	var id ebpf.MapID
	for {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("walking map ids after %d: %w", id, err)
		}
		id = next
		m, err := r.readOne(id, why)
		if errors.Is(err, os.ErrNotExist) {
			continue // freed between GET_NEXT_ID and GET_FD_BY_ID
		}
		if err != nil {
			return err
		}
		r.maps = append(r.maps, m)
	}
}

// readOne reads map id by its fd.
func (r *Reader) readOne(id ebpf.MapID, why string) (Map, error) {
	em, err := ebpf.NewMapFromID(id)
	if err != nil {
		return Map{}, fmt.Errorf("opening map %d: %w", id, err)
	}
	defer em.Close()
	info, err := em.Info()
	if err != nil {
		return Map{}, fmt.Errorf("reading map %d info: %w", id, err)
	}
	m := Map{ID: uint32(id), Type: info.Type, Name: info.Name, KeySize: info.KeySize, ValueSize: info.ValueSize,
		MaxEntries: info.MaxEntries, Flags: info.Flags}
	// Info read the fdinfo already; it reports a memlock of 0 (an arena's)
	// as absent, so only then is the fdinfo read here.
	if m.Memory, m.MemoryKnown = info.Memlock(); !m.MemoryKnown {
		m.Memory, m.MemoryKnown = r.memlock(em.FD())
	}
	if HashFamily(m.Type) {
		m.Entries.Reason = why
	} else {
		m.Entries.Reason = ReasonNotHash
	}
	if r.wantWalk(&m) {
		m.Entries = r.walkFD(em.FD(), m.KeySize, why)
	}
	return m, nil
}
