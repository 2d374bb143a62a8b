{{/* Names and shared fragments of the lockgate chart. */}}

{{- define "lockgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: pods are FULLNAME-0, FULLNAME-1, … */}}
{{- define "lockgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless Service that gives every pod a stable DNS name. */}}
{{- define "lockgate.headless" -}}
{{- printf "%s-headless" (include "lockgate.fullname" .) }}
{{- end }}

{{/* The DNS domain of the pods: FULLNAME-headless.NAMESPACE.svc.DOMAIN */}}
{{- define "lockgate.peerDomain" -}}
{{- printf "%s.%s.svc.%s" (include "lockgate.headless" .) .Release.Namespace .Values.clusterDomain }}
{{- end }}

{{/* The API address of pod ordinal .i (a dict: ctx, i). */}}
{{- define "lockgate.apiAddr" -}}
{{- printf "%s-%d.%s:%d" (include "lockgate.fullname" .ctx) (int .i) (include "lockgate.peerDomain" .ctx) (int .ctx.Values.ports.api) }}
{{- end }}

{{- define "lockgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "lockgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "lockgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lockgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "lockgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lockgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "lockgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* URL scheme of the API: https once TLS is on. */}}
{{- define "lockgate.scheme" -}}
{{- if .Values.tls.secretName }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/*
The checks every template runs: an even or zero number of voters, and
Raft off loopback without peer authentication, are refused.
*/}}
{{- define "lockgate.validate" -}}
{{- $r := int .Values.replicas }}
{{- if or (lt $r 1) (eq (mod $r 2) 0) }}
{{- fail (printf "replicas must be odd (1, 3, 5, …), got %d: an even number of voters tolerates no more failures than one fewer, and a split into halves has no quorum" $r) }}
{{- end }}
{{- if and (not .Values.tls.secretName) (not .Values.insecureRaftNoPeerAuth) }}
{{- fail "tls.secretName is required: a node whose Raft address is not loopback refuses to start without peer authentication (docs/security.md). Name a Secret with tls.crt, tls.key and ca.crt, or set insecureRaftNoPeerAuth=true for a throwaway cluster on a trusted network" }}
{{- end }}
{{- if not (has .Values.antiAffinity (list "preferred" "required" "none")) }}
{{- fail (printf "antiAffinity must be preferred, required or none, got %q" .Values.antiAffinity) }}
{{- end }}
{{- if and .Values.backup.enabled (not .Values.auth.adminTokensSecret) (not .Values.tls.secretName) }}
{{- fail "backup.enabled needs an admin credential: auth.adminTokensSecret, or TLS (tls.secretName: the node certificate is then presented)" }}
{{- end }}
{{- end }}
