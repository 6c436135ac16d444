package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/bpfleet/bpfleet/agent"
)

// TestRESTPodsWire checks the agent's own slim pods client on the wire:
// the paths and field selector it sends, and that it decodes the API
// server's list and watch-event JSON, through the real client-go reflector.
// The server answers like an API server without streaming watch-list
// (sendInitialEvents refused), so the reflector falls back to list+watch.
func TestRESTPodsWire(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.URL.Query().Get("fieldSelector"))
		mu.Unlock()
		if r.URL.Path != "/api/v1/pods" || r.URL.Query().Get("fieldSelector") != "spec.nodeName="+node1 {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","code":404}`, 404)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		switch {
		case q.Get("sendInitialEvents") == "true":
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,"message":"sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}`)
		case q.Get("watch") == "true":
			fl := w.(http.Flusher)
			ev := map[string]any{"type": "ADDED", "object": map[string]any{
				"kind": "Pod", "apiVersion": "v1",
				"metadata": map[string]any{"name": "bpftop-1", "namespace": "monitoring", "uid": uidD, "resourceVersion": "11"},
				"spec":     map[string]any{"nodeName": node1},
				"status":   map[string]any{"containerStatuses": []any{map[string]any{"name": "bpftop", "containerID": "containerd://" + idD}}},
			}}
			json.NewEncoder(w).Encode(ev)
			fl.Flush()
			<-r.Context().Done()
		default:
			fmt.Fprintf(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[
			  {"metadata":{"name":"cilium-x1","namespace":"kube-system","uid":%q,"resourceVersion":"9"},
			   "spec":{"nodeName":%q,"containers":[{"name":"cilium-agent","image":"x"}]},
			   "status":{"phase":"Running","containerStatuses":[{"name":"cilium-agent","containerID":"containerd://%s","ready":true,"restartCount":0,"image":"x","imageID":"y"}]}}]}`, uidA, node1, idA)
		}
	}))
	defer srv.Close()

	client, err := newRESTPods(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	l, err := client.List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node1})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "cilium-x1" {
		t.Fatalf("List = %+v, %v", l, err)
	}
	p, err := New(client, node1, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	if err := p.WaitSynced(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	o := agent.Owner{ContainerID: idA}
	p.Fill(&o)
	if o.PodName != "cilium-x1" || o.ContainerName != "cilium-agent" || o.PodUID != uidA {
		t.Errorf("listed pod: %+v", o)
	}
	eventually(t, "the watched pod", func() bool {
		o := agent.Owner{ContainerID: idD}
		p.Fill(&o)
		return o.PodName == "bpftop-1" && o.ContainerName == "bpftop"
	})
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if s != "/api/v1/pods spec.nodeName="+node1 {
			t.Errorf("request %q: want /api/v1/pods with fieldSelector spec.nodeName=%s", s, node1)
		}
	}
}
