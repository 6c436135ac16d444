package api

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/agent/mapview"
)

// route is one endpoint. The table is the single source of the mux, and a
// test checks it against the paths of openapi.yaml in both directions.
type route struct {
	path    string // ServeMux pattern without the method, OpenAPI path syntax
	params  []string
	handler func(s *Server, w http.ResponseWriter, r *http.Request, q url.Values)
}

var routes = []route{
	{path: "/v1/snapshot", handler: (*Server).getSnapshot},
	{path: "/v1/programs", params: []string{"attach_type", "type", "name", "pod", "namespace", "missed", "sort", "limit"}, handler: (*Server).getPrograms},
	{path: "/v1/programs/{id}", handler: (*Server).getProgram},
	{path: "/v1/programs/{id}/history", handler: (*Server).getHistory},
	{path: "/v1/attach-types", handler: (*Server).getAttachTypes},
	{path: "/v1/maps", params: []string{"type", "name", "prog_id", "pod", "namespace", "sort", "limit"}, handler: (*Server).getMaps},
	{path: "/v1/episodes", params: []string{"open", "prog_id", "source"}, handler: (*Server).getEpisodes},
	{path: "/v1/misses", params: []string{"prog_id"}, handler: (*Server).getMisses},
	{path: "/healthz", handler: (*Server).getHealth},
	{path: "/readyz", handler: (*Server).getReady},
	{path: "/openapi.yaml", handler: (*Server).getOpenAPI},
}

// commonParams are accepted by every endpoint.
var commonParams = []string{"pretty"}

func (s *Server) mux() *http.ServeMux {
	m := http.NewServeMux()
	for _, rt := range routes {
		rt := rt
		// "GET /x" also matches HEAD; the exact path (no trailing-slash
		// subtree) keeps /v1/programs/1/x a 404.
		m.HandleFunc("GET "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			q, err := url.ParseQuery(r.URL.RawQuery)
			if err != nil {
				writeError(w, http.StatusBadRequest, "malformed query string: %v", err)
				return
			}
			for k := range q {
				if !slices.Contains(rt.params, k) && !slices.Contains(commonParams, k) {
					writeError(w, http.StatusBadRequest, "unknown query parameter %q for %s (accepted: %s)", k, rt.path, strings.Join(append(slices.Clone(rt.params), commonParams...), ", "))
					return
				}
			}
			rt.handler(s, w, r, q)
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no endpoint %s (see /openapi.yaml)", r.URL.Path)
	})
	return m
}

// snapshot returns the latest snapshot or answers 503 and returns nil.
func (s *Server) snapshot(w http.ResponseWriter) *agent.Snapshot {
	snap := s.opts.Snapshot()
	if snap == nil {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet: the agent has not finished its first scan")
	}
	return snap
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, q url.Values) {
	if snap := s.snapshot(w); snap != nil {
		writeJSON(w, r, q, snap)
	}
}

// ProgramList is the answer of /v1/programs.
type ProgramList struct {
	Seq      uint64              `json:"seq"`
	Time     time.Time           `json:"time"`
	Interval time.Duration       `json:"interval_ns"`
	Total    int                 `json:"total"` // programs in the snapshot before filtering
	Programs []agent.ProgramStat `json:"programs"`
}

// programFilter is the parsed query of /v1/programs.
type programFilter struct {
	attachType, typ, name, pod, namespace string
	missed                                *bool
	sort                                  string
	limit                                 int
}

var programSorts = map[string]func(a, b *agent.ProgramStat) int{
	"id":         func(a, b *agent.ProgramStat) int { return cmp.Compare(a.ID, b.ID) },
	"cpu":        func(a, b *agent.ProgramStat) int { return cmp.Compare(b.Delta.CPUShare, a.Delta.CPUShare) },
	"runs":       func(a, b *agent.ProgramStat) int { return cmp.Compare(b.Delta.Runs, a.Delta.Runs) },
	"misses":     func(a, b *agent.ProgramStat) int { return cmp.Compare(b.Delta.Misses, a.Delta.Misses) },
	"ns_per_run": func(a, b *agent.ProgramStat) int { return cmp.Compare(b.Delta.NsPerRun, a.Delta.NsPerRun) },
}

func parseProgramFilter(q url.Values) (programFilter, error) {
	f := programFilter{
		attachType: q.Get("attach_type"),
		typ:        q.Get("type"),
		name:       q.Get("name"),
		pod:        q.Get("pod"),
		namespace:  q.Get("namespace"),
		sort:       q.Get("sort"),
	}
	if f.sort == "" {
		f.sort = "id"
	}
	if _, ok := programSorts[f.sort]; !ok {
		return f, fmt.Errorf("sort=%q: want one of id, cpu, runs, misses, ns_per_run", f.sort)
	}
	if v := q.Get("missed"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return f, fmt.Errorf("missed=%q: want true or false", v)
		}
		f.missed = &b
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return f, fmt.Errorf("limit=%q: want a positive integer", v)
		}
		f.limit = n
	}
	return f, nil
}

func (f programFilter) match(p *agent.ProgramStat) bool {
	if f.attachType != "" && p.AttachType != f.attachType {
		return false
	}
	if f.typ != "" && p.Type != f.typ {
		return false
	}
	if f.name != "" && !strings.Contains(p.Name, f.name) {
		return false
	}
	if f.missed != nil {
		missed := p.RecursionMisses != nil && *p.RecursionMisses > 0
		for _, l := range p.Links {
			if l.Missed != nil && *l.Missed > 0 {
				missed = true
			}
		}
		if missed != *f.missed {
			return false
		}
	}
	if f.pod != "" || f.namespace != "" {
		found := false
		for _, o := range p.Owners {
			if (f.pod == "" || o.PodName == f.pod) && (f.namespace == "" || o.PodNamespace == f.namespace) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func (s *Server) getPrograms(w http.ResponseWriter, r *http.Request, q url.Values) {
	f, err := parseProgramFilter(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	snap := s.snapshot(w)
	if snap == nil {
		return
	}
	// Filter and sort pointers: a ProgramStat is large, and only the
	// first limit of them are copied into the answer.
	matched := make([]*agent.ProgramStat, 0, len(snap.Programs))
	for i := range snap.Programs {
		if f.match(snap.Programs[i]) {
			matched = append(matched, snap.Programs[i])
		}
	}
	less := programSorts[f.sort]
	slices.SortStableFunc(matched, func(a, b *agent.ProgramStat) int {
		if c := less(a, b); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if f.limit > 0 && len(matched) > f.limit {
		matched = matched[:f.limit]
	}
	out := ProgramList{Seq: snap.Seq, Time: snap.Time, Interval: snap.Interval, Total: len(snap.Programs), Programs: make([]agent.ProgramStat, len(matched))}
	for i, p := range matched {
		out.Programs[i] = *p
	}
	writeJSON(w, r, q, out)
}

func (s *Server) getProgram(w http.ResponseWriter, r *http.Request, q url.Values) {
	raw := r.PathValue("id")
	id, err := strconv.ParseUint(raw, 10, 32)
	if err != nil || id == 0 {
		writeError(w, http.StatusBadRequest, "program id %q: want a decimal number from 1 to 4294967295", raw)
		return
	}
	snap := s.snapshot(w)
	if snap == nil {
		return
	}
	for i := range snap.Programs {
		if snap.Programs[i].ID == uint32(id) {
			writeJSON(w, r, q, snap.Programs[i])
			return
		}
	}
	writeError(w, http.StatusNotFound, "no program %d in snapshot %d (it may have been unloaded; ids are never reused)", id, snap.Seq)
}

// getHistory serves one program's recent interval history, kept by the
// agent's history store. An unloaded program's history stays for
// history.Linger with unloaded_at set, so a client watching it learns why it
// stopped.
func (s *Server) getHistory(w http.ResponseWriter, r *http.Request, q url.Values) {
	raw := r.PathValue("id")
	id, err := strconv.ParseUint(raw, 10, 32)
	if err != nil || id == 0 {
		writeError(w, http.StatusBadRequest, "program id %q: want a decimal number from 1 to 4294967295", raw)
		return
	}
	if s.snapshot(w) == nil {
		return
	}
	var series history.Series
	ok := false
	if s.opts.History != nil {
		series, ok = s.opts.History(uint32(id))
	}
	if !ok {
		writeError(w, http.StatusNotFound, "no history for program %d (unknown id, or unloaded more than %s ago)", id, history.Linger)
		return
	}
	writeJSON(w, r, q, series)
}

// AttachTypeList is the answer of /v1/attach-types.
type AttachTypeList struct {
	Seq         uint64                 `json:"seq"`
	Time        time.Time              `json:"time"`
	Kernel      agent.KernelInfo       `json:"kernel"`
	AttachTypes []agent.AttachTypeStat `json:"attach_types"`
	Calibration []agent.Calibration    `json:"calibration"`
}

func (s *Server) getAttachTypes(w http.ResponseWriter, r *http.Request, q url.Values) {
	snap := s.snapshot(w)
	if snap == nil {
		return
	}
	writeJSON(w, r, q, AttachTypeList{
		Seq: snap.Seq, Time: snap.Time, Kernel: snap.Kernel,
		AttachTypes: orEmpty(snap.AttachTypes), Calibration: orEmpty(snap.Calibration),
	})
}

// mapSortNames lists mapview.Sorts for error messages, in a fixed order.
var mapSortNames = slices.Sorted(maps.Keys(mapview.Sorts))

// getMaps serves the latest snapshot's maps with their users (mapview):
// every map on the node when the agent reads maps, none with --no-maps
// (scan.source is then empty).
func (s *Server) getMaps(w http.ResponseWriter, r *http.Request, q url.Values) {
	f := mapview.Filter{Type: q.Get("type"), Name: q.Get("name"), Pod: q.Get("pod"), Namespace: q.Get("namespace"), Sort: q.Get("sort")}
	if f.Sort == "" {
		f.Sort = "id"
	}
	if _, ok := mapview.Sorts[f.Sort]; !ok {
		writeError(w, http.StatusBadRequest, "sort=%q: want one of %s", f.Sort, strings.Join(mapSortNames, ", "))
		return
	}
	progID, ok := progIDParam(w, q)
	if !ok {
		return
	}
	f.ProgID = progID
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit=%q: want a positive integer", v)
			return
		}
		f.Limit = n
	}
	snap := s.snapshot(w)
	if snap == nil {
		return
	}
	writeJSON(w, r, q, mapview.Build(snap, f))
}

// EpisodeList is the answer of /v1/episodes.
type EpisodeList struct {
	Seq      uint64          `json:"seq"`
	Time     time.Time       `json:"time"`
	Episodes []agent.Episode `json:"episodes"`
}

func (s *Server) getEpisodes(w http.ResponseWriter, r *http.Request, q url.Values) {
	var open *bool
	if v := q.Get("open"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "open=%q: want true or false", v)
			return
		}
		open = &b
	}
	progID, ok := progIDParam(w, q)
	if !ok {
		return
	}
	source := q.Get("source")
	if source != "" && source != agent.SourceRecursionMisses && source != agent.SourceLinkMissed {
		writeError(w, http.StatusBadRequest, "source=%q: want %s or %s", source, agent.SourceRecursionMisses, agent.SourceLinkMissed)
		return
	}
	snap := s.snapshot(w)
	if snap == nil {
		return
	}
	out := EpisodeList{Seq: snap.Seq, Time: snap.Time, Episodes: []agent.Episode{}}
	for _, e := range snap.Episodes {
		if (open == nil || e.Open == *open) && (progID == 0 || e.ProgID == progID) && (source == "" || e.Source == source) {
			out.Episodes = append(out.Episodes, e)
		}
	}
	writeJSON(w, r, q, out)
}

// Status is the answer of /healthz and /readyz.
type Status struct {
	Status string    `json:"status"`
	Reason string    `json:"reason,omitempty"`
	Seq    uint64    `json:"seq,omitempty"`
	Time   time.Time `json:"time,omitzero"`
}

func (s *Server) getHealth(w http.ResponseWriter, r *http.Request, q url.Values) {
	if s.opts.Health != nil {
		if err := s.opts.Health(); err != nil {
			writeStatus(w, r, q, http.StatusServiceUnavailable, Status{Status: "unhealthy", Reason: err.Error()})
			return
		}
	}
	writeStatus(w, r, q, http.StatusOK, Status{Status: "ok"})
}

func (s *Server) getReady(w http.ResponseWriter, r *http.Request, q url.Values) {
	snap := s.opts.Snapshot()
	if snap == nil {
		writeStatus(w, r, q, http.StatusServiceUnavailable, Status{Status: "not ready", Reason: "no scan has completed yet"})
		return
	}
	if s.opts.StaleAfter > 0 {
		if age := s.opts.Now().Sub(snap.Time); age > s.opts.StaleAfter {
			writeStatus(w, r, q, http.StatusServiceUnavailable, Status{Status: "not ready", Seq: snap.Seq, Time: snap.Time,
				Reason: fmt.Sprintf("latest snapshot is %s old (limit %s): the scan loop is stuck", age.Round(time.Second), s.opts.StaleAfter)})
			return
		}
	}
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			writeStatus(w, r, q, http.StatusServiceUnavailable, Status{Status: "not ready", Seq: snap.Seq, Time: snap.Time, Reason: err.Error()})
			return
		}
	}
	writeStatus(w, r, q, http.StatusOK, Status{Status: "ready", Seq: snap.Seq, Time: snap.Time})
}

func (s *Server) getOpenAPI(w http.ResponseWriter, _ *http.Request, _ url.Values) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Length", strconv.Itoa(len(openAPIDoc)))
	w.Write(openAPIDoc)
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}

// progIDParam reads the optional prog_id parameter (0 when absent); a
// malformed one is answered with 400 and ok false.
func progIDParam(w http.ResponseWriter, q url.Values) (id uint32, ok bool) {
	v := q.Get("prog_id")
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		writeError(w, http.StatusBadRequest, "prog_id=%q: want a decimal number from 1 to 4294967295", v)
		return 0, false
	}
	return uint32(n), true
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	b, _ := json.Marshal(Error{Error: fmt.Sprintf(format, args...)})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeStatus(w http.ResponseWriter, r *http.Request, q url.Values, code int, st Status) {
	writeJSONCode(w, r, q, code, st)
}

func writeJSON(w http.ResponseWriter, r *http.Request, q url.Values, v any) {
	writeJSONCode(w, r, q, http.StatusOK, v)
}

// writeJSONCode encodes fully before writing, so an encoding failure is a
// clean 500 rather than half a document, and HEAD gets a true length.
func writeJSONCode(w http.ResponseWriter, _ *http.Request, q url.Values, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if _, ok := q["pretty"]; ok {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		writeError(w, http.StatusInternalServerError, "encoding response: %v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}
