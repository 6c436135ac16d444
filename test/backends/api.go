package backends

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// queryAPI is the base URL (http://host:port) of a Prometheus-compatible
// query API (/api/v1/...): Prometheus' own, a VictoriaMetrics storage
// node's or vmauth's in front of them. Prometheus and VictoriaMetrics
// embed it, so both stores are queried by the same code.
type queryAPI string

// Sample is one series of an instant query's result.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query runs an instant PromQL query.
func (a queryAPI) Query(ctx context.Context, q string) ([]Sample, error) {
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(ctx, string(a)+"/api/v1/query?query="+url.QueryEscape(q), &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", q, body.Error)
	}
	var out []Sample
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", q, r.Value[1], err)
		}
		out = append(out, Sample{Labels: r.Metric, Value: v})
	}
	return out, nil
}

// Point is one raw sample.
type Point struct {
	Time  time.Time
	Value float64
}

// RawSamples returns the stored samples of the series sel selects over the
// last window, by series (its labels' string form).
func (a queryAPI) RawSamples(ctx context.Context, sel string, window time.Duration) (map[string][]Point, error) {
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	q := fmt.Sprintf("%s[%ds]", sel, int(window.Seconds()))
	if err := getJSON(ctx, string(a)+"/api/v1/query?query="+url.QueryEscape(q), &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", q, body.Error)
	}
	out := map[string][]Point{}
	for _, r := range body.Data.Result {
		var pts []Point
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			s, _ := v[1].(string)
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("query %q: value %v: %w", q, v[1], err)
			}
			pts = append(pts, Point{Time: time.UnixMilli(int64(ts * 1000)), Value: f})
		}
		out[fmt.Sprint(r.Metric)] = pts
	}
	return out, nil
}

// MetricNames returns every metric name the store has.
func (a queryAPI) MetricNames(ctx context.Context) (map[string]bool, error) {
	var body struct {
		Data []string `json:"data"`
	}
	if err := getJSON(ctx, string(a)+"/api/v1/label/__name__/values", &body); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, n := range body.Data {
		out[n] = true
	}
	return out, nil
}

// Series returns the label sets of every series matching match that has
// a sample between from and to (the series API: unlike an instant query,
// it also counts series that went quiet).
func (a queryAPI) Series(ctx context.Context, match string, from, to time.Time) ([]map[string]string, error) {
	var body struct {
		Status string              `json:"status"`
		Error  string              `json:"error"`
		Data   []map[string]string `json:"data"`
	}
	q := url.Values{"match[]": {match}, "start": {strconv.FormatInt(from.Unix(), 10)}, "end": {strconv.FormatInt(to.Unix()+1, 10)}}
	if err := getJSON(ctx, string(a)+"/api/v1/series?"+q.Encode(), &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("series %q: %s", match, body.Error)
	}
	return body.Data, nil
}

func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decoding %s (HTTP %d): %w", u, resp.StatusCode, err)
	}
	return nil
}
