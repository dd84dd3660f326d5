{{- define "kubetrain.name" -}}kubetrain-operator{{- end -}}

{{- define "kubetrain.fullname" -}}
{{- if contains "kubetrain" .Release.Name -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-kubetrain-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kubetrain.labels" -}}
app.kubernetes.io/name: {{ include "kubetrain.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubetrain
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kubetrain.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubetrain.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The one namespace watched, or "" for all; more than one is refused. */}}
{{- define "kubetrain.watchNamespace" -}}
{{- if gt (len .Values.watchNamespaces) 1 -}}
{{- fail "watchNamespaces: kubetrain-operator watches all namespaces ([]) or exactly one" -}}
{{- end -}}
{{- if .Values.watchNamespaces -}}{{ first .Values.watchNamespaces }}{{- end -}}
{{- end -}}

{{/*
Exactly the calls kubetrain-operator makes; the same rules as
deploy/rbac/cluster/cluster_role.yaml (tests/deploy checks both).
*/}}
{{- define "kubetrain.operatorRules" -}}
- apiGroups: ["kubetrain.io"]
  resources: ["trainingjobs"]
  verbs: ["get", "list", "watch", "delete"]
- apiGroups: ["kubetrain.io"]
  resources: ["trainingjobs/status"]
  verbs: ["update"]
- apiGroups: ["kubetrain.io"]
  resources: ["trainingjobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods", "services", "persistentvolumeclaims"]
  verbs: ["list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "update"]
- apiGroups: [""]
  resources: ["nodes", "resourcequotas"]
  verbs: ["list", "watch"]
- apiGroups: ["scheduling.k8s.io"]
  resources: ["priorityclasses"]
  verbs: ["list", "watch"]
{{- end -}}
