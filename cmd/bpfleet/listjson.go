package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/bpfleet/bpfleet/agent"
)

// writeListJSON writes `bpfleet list -o json` (compact) for one snapshot
// byte for byte as encoding/json writes newListOutput(s, false)
// (listjson_test.go holds it to that), but encodes the programs by hand and
// straight from the snapshot: over 1,000 programs reflection cost more CPU
// than reading them from the kernel, and a copy of the programs more page
// faults than it is worth. The small parts go through encoding/json. It is
// written in chunks through one small buffer: a buffer for the whole
// document (~0.5 MB for 1,000 programs) costs a one-shot list a page fault
// per 4 KB.
func writeListJSON(w io.Writer, s *agent.Snapshot) error {
	const chunk = 32 << 10
	b := make([]byte, 0, chunk+8<<10)
	var err error
	field := func(name string, v any, first bool) {
		if err != nil {
			return
		}
		if !first {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		var enc []byte
		enc, err = json.Marshal(v)
		b = append(b, enc...)
	}
	b = append(b, '{')
	field("time", s.Time, true)
	field("kernel", s.Kernel, false)
	field("stats", s.Stats, false)
	if err != nil {
		return err
	}
	b = append(b, `,"programs":[`...)
	for i := range s.Programs {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendProgram(b, &s.Programs[i].Program); err != nil {
			return err
		}
		if len(b) >= chunk {
			if _, err := w.Write(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	b = append(b, ']')
	field("attach_types", s.AttachTypes, false)
	field("scan", s.Scan, false)
	field("stats_tax", s.StatsTax, false)
	field("agent_cpu_share", s.AgentCPUShare, false)
	if err != nil {
		return err
	}
	b = append(b, '}', '\n')
	_, err = w.Write(b)
	return err
}

// appendProgram encodes one agent.Program in its struct's field order.
func appendProgram(b []byte, p *agent.Program) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, uint64(p.ID), 10)
	b = appendStr(b, "name", p.Name)
	b = appendStr(b, "tag", p.Tag)
	b = appendStr(b, "type", p.Type)
	b = appendStr(b, "attach_type", p.AttachType)
	b = appendStr(b, "attach_target", p.AttachTarget)
	b = append(b, `,"sleepable":`...)
	if p.Sleepable == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendBool(b, *p.Sleepable)
	}
	b = appendStr(b, "miss_kind", p.MissKind)
	var err error
	b = append(b, `,"load_time":`...)
	if y := p.LoadTime.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("program %d: load time %v is outside the years JSON can encode", p.ID, p.LoadTime)
	}
	// What time.Time.MarshalJSON writes, without its allocation.
	b = append(b, '"')
	b = p.LoadTime.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = appendOpt(b, "uid", p.UID != nil, func(b []byte) []byte { return strconv.AppendUint(b, uint64(*p.UID), 10) })
	b = append(b, `,"map_ids":`...)
	if p.MapIDs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, id := range p.MapIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(id), 10)
		}
		b = append(b, ']')
	}
	if p.BTFID != 0 { // omitempty
		b = appendUint(b, "btf_id", uint64(p.BTFID))
	}
	b = appendUint(b, "jited_size", uint64(p.JitedSize))
	b = appendUint(b, "xlated_size", uint64(p.XlatedSize))
	b = appendOpt(b, "memlock", p.Memlock != nil, func(b []byte) []byte { return strconv.AppendUint(b, *p.Memlock, 10) })
	b = appendOpt(b, "verified_insns", p.VerifiedInsns != nil, func(b []byte) []byte { return strconv.AppendUint(b, uint64(*p.VerifiedInsns), 10) })
	b = appendUint(b, "run_count", p.RunCount)
	b = appendUint(b, "run_time_ns", p.RunTimeNs)
	b = appendOpt(b, "recursion_misses", p.RecursionMisses != nil, func(b []byte) []byte { return strconv.AppendUint(b, *p.RecursionMisses, 10) })
	if b, err = appendSlice(b, "links", p.Links); err != nil {
		return nil, err
	}
	if b, err = appendSlice(b, "owners", p.Owners); err != nil {
		return nil, err
	}
	if len(p.Pins) > 0 { // omitempty
		if b, err = appendSlice(b, "pins", p.Pins); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func appendKey(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendUint(b []byte, name string, v uint64) []byte {
	return strconv.AppendUint(appendKey(b, name), v, 10)
}

func appendOpt(b []byte, name string, ok bool, val func([]byte) []byte) []byte {
	b = appendKey(b, name)
	if !ok {
		return append(b, "null"...)
	}
	return val(b)
}

// appendSlice encodes the rarely non-empty slices with encoding/json (a
// nil or empty one without: converting it to an interface allocates).
func appendSlice[T any](b []byte, name string, v []T) ([]byte, error) {
	b = appendKey(b, name)
	switch {
	case v == nil:
		return append(b, "null"...), nil
	case len(v) == 0:
		return append(b, '[', ']'), nil
	}
	enc, err := json.Marshal(v)
	return append(b, enc...), err
}

// appendStr quotes s as encoding/json does (HTML-safe escapes included),
// with a fast path for the plain ASCII that names, tags and targets are.
func appendStr(b []byte, name, s string) []byte {
	b = appendKey(b, name)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s)
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
