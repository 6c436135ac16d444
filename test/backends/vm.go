package backends

// VictoriaMetricsVersion is the release of victoria-metrics, vmagent,
// vmalert, vmalert-tool and vmauth that scripts/build-backends.sh builds.
const VictoriaMetricsVersion = "v1.151.0"
