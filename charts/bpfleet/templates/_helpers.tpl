{{/* Names and labels. */}}
{{- define "bpfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "bpfleet.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "bpfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bpfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bpfleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "bpfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: node-agent
{{- end -}}

{{- define "bpfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "bpfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "bpfleet.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* True ("true") when the API address only accepts connections from inside the pod/node. */}}
{{- define "bpfleet.apiLoopback" -}}
{{- $a := .Values.api.address -}}
{{- if or (eq $a "localhost") (eq $a "::1") (hasPrefix "127." $a) -}}true{{- end -}}
{{- end -}}

{{- define "bpfleet.apiHostPort" -}}
{{- if contains ":" .Values.api.address -}}
{{- printf "[%s]:%d" .Values.api.address (int .Values.api.port) -}}
{{- else -}}
{{- printf "%s:%d" .Values.api.address (int .Values.api.port) -}}
{{- end -}}
{{- end -}}

{{/*
Invalid combinations the schema cannot express. Each message says what is
wrong and what to set.
*/}}
{{- define "bpfleet.validate" -}}
{{- if not .Values.api.enabled -}}
{{- fail "api.enabled=false leaves the liveness and readiness probes nothing to ask (bpfleet health reads the agent's local API): keep it on; at api.address=127.0.0.1 (the default) nothing outside the pod reaches it" -}}
{{- end -}}
{{- if and .Values.api.enabled (not (include "bpfleet.apiLoopback" .)) (not .Values.api.token.existingSecret) -}}
{{- fail (printf "api.address=%s is not loopback: set api.token.existingSecret to a Secret holding a bearer token, or keep api.address=127.0.0.1" .Values.api.address) -}}
{{- end -}}
{{- if and .Values.otel.headers .Values.otel.existingSecret.name -}}
{{- fail "otel.headers and otel.existingSecret.name are both set: keep the headers in one place" -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled (ne .Values.otel.metricsExporter "prometheus") -}}
{{- fail (printf "serviceMonitor.enabled needs otel.metricsExporter=prometheus (it is %s): there is nothing to scrape otherwise" .Values.otel.metricsExporter) -}}
{{- end -}}
{{- if and .Values.api.enabled (eq (int .Values.api.port) (int .Values.otel.prometheus.port)) (eq .Values.otel.metricsExporter "prometheus") -}}
{{- fail (printf "api.port and otel.prometheus.port are both %d: pick two ports" (int .Values.api.port)) -}}
{{- end -}}
{{- if and (not .Values.serviceAccount.create) .Values.rbac.create (not .Values.serviceAccount.name) -}}
{{- fail "rbac.create binds the ClusterRole to a ServiceAccount: with serviceAccount.create=false set serviceAccount.name" -}}
{{- end -}}
{{- end -}}
