package api

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/agent/history"
	"github.com/bpfleet/bpfleet/agent/mapview"
)

type openAPIDocument struct {
	OpenAPI string `json:"openapi"`
	Paths   map[string]map[string]struct {
		Parameters []struct {
			Ref  string `json:"$ref"`
			Name string `json:"name"`
			In   string `json:"in"`
		} `json:"parameters"`
		Responses map[string]any `json:"responses"`
	} `json:"paths"`
	Components struct {
		Parameters map[string]struct {
			Name string `json:"name"`
		} `json:"parameters"`
		Schemas map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

func loadDoc(t *testing.T) openAPIDocument {
	t.Helper()
	var d openAPIDocument
	if err := yaml.Unmarshal(OpenAPI(), &d); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(d.OpenAPI, "3.") {
		t.Fatalf("api/openapi.yaml: openapi %q, want 3.x", d.OpenAPI)
	}
	return d
}

// TestOpenAPICoversRoutes: every route in the mux is documented with the
// query parameters it accepts, and every documented path is served.
func TestOpenAPICoversRoutes(t *testing.T) {
	d := loadDoc(t)
	served := map[string]route{}
	for _, rt := range routes {
		served[rt.path] = rt
	}
	for p := range d.Paths {
		if _, ok := served[p]; !ok {
			t.Errorf("openapi.yaml documents %s, which the server does not serve", p)
		}
	}
	for p, rt := range served {
		ops, ok := d.Paths[p]
		if !ok {
			t.Errorf("route %s is not documented in openapi.yaml", p)
			continue
		}
		for m := range ops {
			if m != "get" {
				t.Errorf("openapi.yaml documents %s %s; the API is GET/HEAD only", strings.ToUpper(m), p)
			}
		}
		get, ok := ops["get"]
		if !ok {
			t.Errorf("openapi.yaml has no GET for %s", p)
			continue
		}
		var documented []string
		for _, prm := range get.Parameters {
			name, in := prm.Name, prm.In
			if prm.Ref != "" {
				name, in = d.Components.Parameters[strings.TrimPrefix(prm.Ref, "#/components/parameters/")].Name, "query"
			}
			if in == "query" {
				documented = append(documented, name)
			}
		}
		want := append(slices.Clone(rt.params), commonParams...)
		if p == "/openapi.yaml" {
			want = rt.params // the document itself takes no pretty
		}
		sort.Strings(documented)
		sort.Strings(want)
		if !slices.Equal(documented, want) {
			t.Errorf("%s: openapi.yaml documents query parameters %v, the server accepts %v", p, documented, want)
		}
		if _, ok := get.Responses["200"]; !ok {
			t.Errorf("%s: no 200 response documented", p)
		}
	}
}

// TestOpenAPISchemasMatchTypes: each documented schema has exactly the JSON
// fields of the Go type it describes, so the document cannot drift from
// agent/types.go (and the types it re-exports) silently.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	d := loadDoc(t)
	for name, v := range map[string]any{
		"Snapshot": agent.Snapshot{}, "ProgramStat": agent.ProgramStat{}, "Link": agent.Link{}, "Owner": agent.Owner{},
		"Rates": agent.Rates{}, "AttachTypeStat": agent.AttachTypeStat{}, "OwnerStat": agent.OwnerStat{},
		"Episode": agent.Episode{}, "EpisodeInterval": agent.EpisodeInterval{}, "StatsState": agent.StatsState{},
		"KernelInfo": agent.KernelInfo{}, "Calibration": agent.Calibration{}, "ScanStats": agent.ScanStats{},
		"ProgramList": ProgramList{}, "Status": Status{}, "Error": Error{},
		"History": history.Series{}, "HistoryPoint": history.Point{},
		"Map": agent.Map{}, "MapScan": agent.MapScan{}, "MapList": mapview.List{}, "MapEntry": mapview.Map{},
		"MapUser": mapview.User{}, "MapOwner": mapview.MapOwner{},
		"MissCauses": agent.MissCauses{}, "MissSample": agent.MissSample{}, "MissWatch": agent.MissWatch{},
		"WatchedProgram": agent.WatchedProgram{}, "EpisodeTask": agent.EpisodeTask{}, "EpisodeStack": agent.EpisodeStack{},
		"MissList": MissList{},
	} {
		s, ok := d.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.yaml has no schema %s", name)
			continue
		}
		var documented []string
		for k := range s.Properties {
			documented = append(documented, k)
		}
		fields := jsonFields(reflect.TypeOf(v))
		sort.Strings(documented)
		sort.Strings(fields)
		if !slices.Equal(documented, fields) {
			t.Errorf("schema %s documents %v, Go type %T has %v", name, documented, v, fields)
		}
		for _, f := range nullFields(reflect.TypeOf(v)) {
			prop, _ := s.Properties[f].(map[string]any)
			if types, _ := prop["type"].([]any); prop != nil && !slices.Contains(types, any("null")) {
				t.Errorf("schema %s: %s is %v; the Go field marshals null (a pointer without omitempty), so its type must list \"null\"", name, f, prop["type"])
			}
		}
	}
}

// nullFields are t's JSON fields that marshal as null: pointers to a
// scalar without omitempty, such as a counter the kernel may lack.
func nullFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, nullFields(f.Type)...)
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" || f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() == reflect.Struct || strings.Contains(opts, "omitempty") {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}
