{{/* The chart's name. */}}
{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the prefix of every object's name. */}}
{{- define "sluice.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component (controlplane, broker): pass (list . "broker"). */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" (index . 0) }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "sluice.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sluice.controlplaneName" -}}{{ include "sluice.fullname" . }}-controlplane{{- end }}
{{- define "sluice.brokerName" -}}{{ include "sluice.fullname" . }}-broker{{- end }}
{{- define "sluice.brokerHeadlessName" -}}{{ include "sluice.fullname" . }}-broker-headless{{- end }}

{{/* The control plane's URL as brokers reach it. */}}
{{- define "sluice.controlplaneURL" -}}
http://{{ include "sluice.controlplaneName" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:{{ .Values.controlplane.port }}
{{- end }}

{{/* Secret names: chart-created unless an existing one is named. */}}
{{- define "sluice.postgresSecret" -}}
{{- if .Values.postgres.url }}{{ include "sluice.fullname" . }}-postgres{{ else }}{{ required "set postgres.url or postgres.existingSecret" .Values.postgres.existingSecret }}{{ end }}
{{- end }}
{{- define "sluice.postgresSecretKey" -}}
{{- if .Values.postgres.url }}url{{ else }}{{ .Values.postgres.existingSecretKey }}{{ end }}
{{- end }}
{{- define "sluice.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "sluice.fullname" .)) .Values.tokens.existingSecret }}
{{- end }}
{{- define "sluice.tokenKey" -}}
{{- $ctx := index . 0 }}{{ $which := index . 1 }}
{{- if $ctx.Values.tokens.existingSecret }}{{ index $ctx.Values.tokens (printf "%sTokenKey" $which) }}{{ else }}{{ $which }}-token{{ end }}
{{- end }}
{{/* "" when brokers use the AWS default credential chain. */}}
{{- define "sluice.s3Secret" -}}
{{- if .Values.s3.existingSecret }}{{ .Values.s3.existingSecret }}{{ else if .Values.s3.accessKeyId }}{{ include "sluice.fullname" . }}-s3{{ end }}
{{- end }}

{{/* The default affinity: prefer other zones, then other nodes, than the component's other pods. */}}
{{- define "sluice.spreadAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: topology.kubernetes.io/zone
        labelSelector:
          matchLabels:
            {{- include "sluice.selectorLabels" . | nindent 12 }}
    - weight: 50
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "sluice.selectorLabels" . | nindent 12 }}
{{- end }}

{{/* Checks of values that would render a cluster that cannot work. */}}
{{- define "sluice.validate" -}}
{{- if lt (int .Values.brokers.replicas) (int .Values.controlplane.replicationFactor) }}
{{- fail (printf "brokers.replicas (%d) must be at least controlplane.replicationFactor (%d): the internal offsets and transaction-state topics are created only once that many brokers are live" (int .Values.brokers.replicas) (int .Values.controlplane.replicationFactor)) }}
{{- end }}
{{- if not (has .Values.brokers.rack.mode (list "zoneLabel" "static" "none")) }}
{{- fail (printf "brokers.rack.mode must be zoneLabel, static or none; got %q" .Values.brokers.rack.mode) }}
{{- end }}
{{- if not (has .Values.brokers.updateStrategy (list "RollingUpdate" "OnDelete")) }}
{{- fail (printf "brokers.updateStrategy must be RollingUpdate or OnDelete; got %q" .Values.brokers.updateStrategy) }}
{{- end }}
{{- if and (eq .Values.brokers.rack.mode "static") (not .Values.brokers.rack.value) }}
{{- fail "brokers.rack.mode static needs brokers.rack.value" }}
{{- end }}
{{- if and .Values.s3.accessKeyId (not .Values.s3.secretAccessKey) }}
{{- fail "s3.accessKeyId needs s3.secretAccessKey" }}
{{- end }}
{{- range $k := list "operatorToken" "brokerToken" }}
{{- $v := index $.Values.tokens $k }}
{{- if and $v (lt (len $v) 16) }}
{{- fail (printf "tokens.%s must be at least 16 characters" $k) }}
{{- end }}
{{- end }}
{{- end }}
