package kube

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// ChartDir is the repository's charts/bpfleet.
func ChartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "charts", "bpfleet")
}

// HelmInstall runs `helm install name charts/bpfleet -n ns` with vals
// through the Helm library, as the cluster admin, without waiting for the
// release's pods. wrap, when not nil, adjusts the client config (a warning
// handler, say). It returns the release and the Helm configuration for
// later actions on it (an upgrade).
func (c *Cluster) HelmInstall(ns, name string, vals map[string]any, wrap func(*rest.Config) *rest.Config) (*release.Release, *action.Configuration, error) {
	return c.HelmInstallChart(ChartDir(), ns, name, vals, wrap)
}

// HelmInstallChart is HelmInstall of the chart in dir (another release's
// charts/bpfleet, say).
func (c *Cluster) HelmInstallChart(dir, ns, name string, vals map[string]any, wrap func(*rest.Config) *rest.Config) (*release.Release, *action.Configuration, error) {
	host, token, ca := c.APIURL(), c.AdminToken, c.CAFile()
	flags := genericclioptions.NewConfigFlags(false)
	flags.APIServer, flags.BearerToken, flags.CAFile, flags.Namespace = &host, &token, &ca, &ns
	flags.WrapConfigFn = wrap
	cfg := new(action.Configuration)
	var debug []string
	if err := cfg.Init(flags, ns, "secret", func(format string, v ...any) { debug = append(debug, fmt.Sprintf(format, v...)) }); err != nil {
		return nil, nil, fmt.Errorf("helm init: %w", err)
	}
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.Timeout = name, ns, 2*time.Minute
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, nil, fmt.Errorf("helm install: %w\nhelm debug log:\n%s", err, strings.Join(debug, "\n"))
	}
	return rel, cfg, nil
}
