// Command gendocs writes the files made from the exporter's code: METRICS.md
// from the metrics table (exporter.MetricsDoc) and the Grafana dashboards
// (exporter/dashboards). go generate runs it (make generate); the
// exporter's and the dashboards' tests fail when the committed files
// differ from what it writes.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/bpfleet/bpfleet/exporter"
	"github.com/bpfleet/bpfleet/exporter/dashboards"
)

func main() {
	metrics := flag.String("metrics", "", "write METRICS.md to this file")
	dash := flag.String("dashboards", "", "write the dashboards' JSON files into this folder")
	flag.Parse()
	if err := run(*metrics, *dash); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}

func run(metrics, dash string) error {
	if metrics == "" && dash == "" {
		return fmt.Errorf("nothing to write: give -metrics FILE and/or -dashboards DIR")
	}
	if metrics != "" {
		if err := os.WriteFile(metrics, []byte(exporter.MetricsDoc()), 0o644); err != nil {
			return err
		}
	}
	if dash != "" {
		return dashboards.Write(dash)
	}
	return nil
}
