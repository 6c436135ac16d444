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
	var lt loadTimes
	for i := range s.Programs {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendProgram(b, &s.Programs[i].Program, s.Programs[i].MissCauses, &lt); err != nil {
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

// appendProgram encodes one listProgram in its struct's field order.
// Each key is appended with its separator and quotes as one literal.
func appendProgram(b []byte, p *agent.Program, mc *agent.MissCauses, lt *loadTimes) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, uint64(p.ID), 10)
	b = appendStr(b, `,"name":`, p.Name)
	b = appendStr(b, `,"tag":`, p.Tag)
	b = appendStr(b, `,"type":`, p.Type)
	b = appendStr(b, `,"attach_type":`, p.AttachType)
	b = appendStr(b, `,"attach_target":`, p.AttachTarget)
	if p.TargetClass != "" { // omitempty
		b = appendStr(b, `,"target_class":`, p.TargetClass)
	}
	b = append(b, `,"sleepable":`...)
	if p.Sleepable == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendBool(b, *p.Sleepable)
	}
	b = appendStr(b, `,"miss_kind":`, p.MissKind)
	var err error
	b = append(b, `,"load_time":`...)
	if b, err = lt.append(b, p.LoadTime); err != nil {
		return nil, fmt.Errorf("program %d: %w", p.ID, err)
	}
	b = append(b, `,"uid":`...)
	if p.UID == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendUint(b, uint64(*p.UID), 10)
	}
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
		b = appendUint(b, `,"btf_id":`, uint64(p.BTFID))
	}
	b = appendUint(b, `,"jited_size":`, uint64(p.JitedSize))
	b = appendUint(b, `,"xlated_size":`, uint64(p.XlatedSize))
	b = appendUintPtr(b, `,"memlock":`, p.Memlock)
	b = append(b, `,"verified_insns":`...)
	if p.VerifiedInsns == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendUint(b, uint64(*p.VerifiedInsns), 10)
	}
	b = appendUint(b, `,"run_count":`, p.RunCount)
	b = appendUint(b, `,"run_time_ns":`, p.RunTimeNs)
	b = appendUintPtr(b, `,"recursion_misses":`, p.RecursionMisses)
	if b, err = appendSlice(b, `,"links":`, p.Links); err != nil {
		return nil, err
	}
	if b, err = appendSlice(b, `,"owners":`, p.Owners); err != nil {
		return nil, err
	}
	if len(p.Pins) > 0 { // omitempty
		if b, err = appendSlice(b, `,"pins":`, p.Pins); err != nil {
			return nil, err
		}
	}
	// listProgram's own field, after the embedded Program's.
	b = appendUint(b, `,"memory_bytes":`, agent.ProgramMemory(p))
	if mc != nil { // omitempty
		b = append(b, `,"miss_causes":`...)
		sep := byte('{')
		mc.Each(func(cause string, n uint64) {
			b = appendUint(append(b, sep, '"'), cause+`":`, n)
			sep = ','
		})
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// appendUint appends key (`,"name":`) and v.
func appendUint(b []byte, key string, v uint64) []byte {
	return strconv.AppendUint(append(b, key...), v, 10)
}

// appendUintPtr appends key and *v, or null.
func appendUintPtr(b []byte, key string, v *uint64) []byte {
	b = append(b, key...)
	if v == nil {
		return append(b, "null"...)
	}
	return strconv.AppendUint(b, *v, 10)
}

// appendSlice encodes the rarely non-empty slices with encoding/json (a
// nil or empty one without: converting it to an interface allocates).
func appendSlice[T any](b []byte, key string, v []T) ([]byte, error) {
	b = append(b, key...)
	switch {
	case v == nil:
		return append(b, "null"...), nil
	case len(v) == 0:
		return append(b, '[', ']'), nil
	}
	enc, err := json.Marshal(v)
	return append(b, enc...), err
}

// appendStr appends key and s quoted as encoding/json quotes it (HTML-safe
// escapes included), with a fast path for the plain ASCII that names,
// tags and targets are.
func appendStr(b []byte, key, s string) []byte {
	b = append(b, key...)
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

// loadTimes writes load times as time.Time.MarshalJSON does (RFC 3339
// with nanoseconds, in the time's location), keeping the date, clock and
// zone of the last second it formatted: programs are loaded in bursts, many
// within one second, and formatting each whole cost a one-shot list of
// 1,000 programs ~15% of its JSON.
type loadTimes struct {
	sec    int64
	loc    *time.Location
	prefix []byte // "2006-01-02T15:04:05"
	zone   []byte // "Z" or "-07:00"
}

func (c *loadTimes) append(b []byte, t time.Time) ([]byte, error) {
	if c.prefix == nil || t.Unix() != c.sec || t.Location() != c.loc {
		if y := t.Year(); y < 0 || y > 9999 {
			return nil, fmt.Errorf("load time %v is outside the years JSON can encode", t)
		}
		// Without its fraction: the year has four digits, so the clock
		// ends at byte 19 and the zone follows.
		s := t.AppendFormat(c.prefix[:0], time.RFC3339)
		c.sec, c.loc, c.prefix, c.zone = t.Unix(), t.Location(), s[:19], append(c.zone[:0], s[19:]...)
	}
	b = append(b, '"')
	b = append(b, c.prefix...)
	if ns := t.Nanosecond(); ns != 0 {
		// RFC3339Nano's ".999999999": nine digits, trailing zeros cut.
		var d [10]byte
		d[0] = '.'
		for i := 9; i > 0; i-- {
			d[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for d[n-1] == '0' {
			n--
		}
		b = append(b, d[:n]...)
	}
	b = append(b, c.zone...)
	return append(b, '"'), nil
}
