{{/* The release's base name: the release name, or release-chart when the chart name is not in it. */}}
{{- define "loadext.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "loadext.schedulerFullname" -}}
{{- printf "%s-scheduler" (include "loadext.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Whether loadext patches Nodes: the loadext.io/reopened annotation (requeueStranded) or its
taints (config.rebalance.taints); "" when not. The node-change policy narrows the patch. */}}
{{- define "loadext.patchesNodes" -}}
{{- $rebalance := .Values.config.rebalance | default dict -}}
{{- $taints := $rebalance.taints | default dict -}}
{{- if or .Values.requeueStranded (and $rebalance.enabled (or $taints.hot $taints.refused)) -}}true{{- end -}}
{{- end -}}

{{/* Whether the rebalancer is on: it then evicts pods, holds a Lease and records Events. */}}
{{- define "loadext.rebalances" -}}
{{- $rebalance := .Values.config.rebalance | default dict -}}
{{- if $rebalance.enabled -}}true{{- end -}}
{{- end -}}

{{- define "loadext.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: loadext
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "loadext.selectorLabels" -}}
app.kubernetes.io/name: loadext
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "loadext.schedulerSelectorLabels" -}}
app.kubernetes.io/name: loadext-scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* A Deployment's spread: the given affinity, or by default its replicas preferably on
distinct nodes; and the given topologySpreadConstraints, or by default, with two replicas or
more, preferably across zones. Called with (dict "values" <the component's values> "selector"
<its selector labels>). */}}
{{- define "loadext.spread" -}}
{{- $v := .values -}}
affinity:
{{- if $v.affinity }}
  {{- toYaml $v.affinity | nindent 2 }}
{{- else }}
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels: {{- .selector | nindent 14 }}
{{- end }}
{{- if $v.topologySpreadConstraints }}
topologySpreadConstraints: {{- toYaml $v.topologySpreadConstraints | nindent 2 }}
{{- else if gt (int $v.replicas) 1 }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels: {{- .selector | nindent 8 }}
{{- end }}
{{- end -}}

{{- define "loadext.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* loadext's config: the values' config with bind switched by .Values.bind. */}}
{{- define "loadext.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "bind" (dict "enabled" .Values.bind) -}}
{{- toYaml $config -}}
{{- end -}}

{{- define "loadext.serviceHost" -}}
{{- printf "%s.%s.svc" (include "loadext.fullname" .) .Release.Namespace -}}
{{- end -}}
