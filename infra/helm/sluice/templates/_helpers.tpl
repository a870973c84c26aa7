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
{{ ternary "https" "http" (not (empty .Values.tls.enabled)) }}://{{ include "sluice.controlplaneName" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}:{{ .Values.controlplane.port }}
{{- end }}

{{/* A broker pod's stable name in the headless Service, as it advertises it (without the port):
pass (list . id). */}}
{{- define "sluice.brokerHost" -}}
{{- $ := index . 0 }}
{{- include "sluice.brokerName" $ }}-{{ index . 1 }}.{{ include "sluice.brokerHeadlessName" $ }}.{{ $.Release.Namespace }}.svc.{{ $.Values.clusterDomain }}
{{- end }}

{{/* Broker id's external advertised address (brokers.external.advertisedAddress with "{id}"
replaced): pass (list . id). */}}
{{- define "sluice.brokerExternalAddr" -}}
{{- (index . 0).Values.brokers.external.advertisedAddress | replace "{id}" (toString (index . 1)) }}
{{- end }}

{{/* The host of an address: host:port, [v6]:port or scheme://host:port. */}}
{{- define "sluice.hostOf" -}}
{{- $a := regexReplaceAll "^[a-z]+://" . "" }}
{{- if hasPrefix "[" $a }}{{ regexReplaceAll "^\\[([^\\]]*)\\].*$" $a "${1}" }}{{ else }}{{ regexReplaceAll ":[^:]*$" $a "" }}{{ end }}
{{- end }}

{{/* Where the pods mount their TLS Secrets. A broker's files are under <id>/. */}}
{{- define "sluice.tlsDir" -}}/etc/sluice/tls{{- end }}

{{/* The TLS Secrets: cert-manager's layout (tls.crt, tls.key, ca.crt). Broker: pass (list . id). */}}
{{- define "sluice.controlplaneTLSSecret" -}}{{ include "sluice.controlplaneName" . }}-tls{{- end }}
{{- define "sluice.brokerTLSSecret" -}}{{ include "sluice.brokerName" (index . 0) }}-{{ index . 1 }}-tls{{- end }}

{{/* The TLS flags of a server whose tls.crt, tls.key and ca.crt are in dir: the API listener's,
the cluster's (mutual TLS between the servers), the external listener's when it is on and the
operator listener's with tls.metrics. Pass (list . dir external). */}}
{{- define "sluice.tlsArgs" -}}
{{- $ := index . 0 }}{{ $dir := index . 1 -}}
- --tls-cert={{ $dir }}/tls.crt
- --tls-key={{ $dir }}/tls.key
- --cluster-ca={{ $dir }}/ca.crt
- --cluster-cert={{ $dir }}/tls.crt
- --cluster-key={{ $dir }}/tls.key
{{- if index . 2 }}
- --external-tls-cert={{ $dir }}/tls.crt
- --external-tls-key={{ $dir }}/tls.key
{{- end }}
{{- if $.Values.tls.metrics }}
- --metrics-tls-cert={{ $dir }}/tls.crt
- --metrics-tls-key={{ $dir }}/tls.key
{{- end }}
{{- end }}

{{/* The spec of a cert-manager Certificate after its secretName: pass (list . hosts uri), hosts
being DNS names and IP addresses. */}}
{{- define "sluice.certificateSpec" -}}
{{- $ := index . 0 }}{{ $cm := $.Values.tls.certManager }}
{{- $dns := list }}{{ $ips := list }}
{{- range $h := uniq (index . 1) }}
{{- if or (regexMatch "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$" $h) (contains ":" $h) }}
{{- $ips = append $ips $h }}
{{- else }}
{{- $dns = append $dns $h }}
{{- end }}
{{- end -}}
secretTemplate:
  labels:
    {{- include "sluice.labels" $ | nindent 4 }}
duration: {{ $cm.duration }}
renewBefore: {{ $cm.renewBefore }}
privateKey:
  algorithm: ECDSA
  size: 256
  encoding: PKCS8
  rotationPolicy: Always
# serverAuth for the listeners, clientAuth for the calls between the servers (mutual TLS).
usages:
  - digital signature
  - server auth
  - client auth
dnsNames:
  {{- toYaml $dns | nindent 2 }}
{{- with $ips }}
ipAddresses:
  {{- toYaml . | nindent 2 }}
{{- end }}
# The server's identity for the cluster's mutual TLS: exactly one URI SAN.
uris:
  - {{ index . 2 }}
issuerRef:
  name: {{ $cm.issuerRef.name }}
  kind: {{ $cm.issuerRef.kind }}
  group: {{ $cm.issuerRef.group }}
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
{{- if and .Values.tls.enabled .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name: a CA Issuer or ClusterIssuer (or set tls.certManager.enabled=false and create the TLS Secrets)" }}
{{- end }}
{{- if and .Values.tls.metrics (not .Values.tls.enabled) }}
{{- fail "tls.metrics needs tls.enabled: the operator listeners serve the servers' certificates" }}
{{- end }}
{{- range $role := list "controlplane" "brokers" }}
{{- $x := index $.Values $role "external" }}
{{- if $x.enabled }}
{{- if not (has $x.service.type (list "LoadBalancer" "NodePort" "ClusterIP")) }}
{{- fail (printf "%s.external.service.type must be LoadBalancer, NodePort or ClusterIP; got %q" $role $x.service.type) }}
{{- end }}
{{- if has (int $x.port) (list (int (index $.Values $role "port")) (int (index $.Values $role "metricsPort"))) }}
{{- fail (printf "%s.external.port (%d) must differ from %s.port and %s.metricsPort" $role (int $x.port) $role $role) }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.controlplane.external }}
{{- if and .enabled .service.nodePort (eq .service.type "ClusterIP") }}
{{- fail "controlplane.external.service.nodePort needs service type NodePort or LoadBalancer, not ClusterIP" }}
{{- end }}
{{- end }}
{{- with .Values.brokers.external }}
{{- if .enabled }}
{{- if not .advertisedAddress }}
{{- fail "brokers.external.enabled needs brokers.external.advertisedAddress: the host:port outside clients reach broker {id} at, e.g. broker-{id}.streaming.example.com:443" }}
{{- end }}
{{- if not (contains "{id}" .advertisedAddress) }}
{{- fail (printf "brokers.external.advertisedAddress %q must contain {id}: every broker needs its own address" .advertisedAddress) }}
{{- end }}
{{- if not (regexMatch "^([a-z]+://)?([^:/\\[\\]]+|\\[[0-9a-fA-F:.]+\\]):[0-9]+$" (include "sluice.brokerExternalAddr" (list $ $.Values.brokers.firstId))) }}
{{- fail (printf "brokers.external.advertisedAddress %q must be host:port (with {id} in it)" .advertisedAddress) }}
{{- end }}
{{- if gt (len .service.nodePorts) (int $.Values.brokers.replicas) }}
{{- fail (printf "brokers.external.service.nodePorts has %d entries for %d brokers (brokers.replicas): entry N is broker firstId+N's" (len .service.nodePorts) (int $.Values.brokers.replicas)) }}
{{- end }}
{{- if and .service.nodePorts (eq .service.type "ClusterIP") }}
{{- fail "brokers.external.service.nodePorts needs service type NodePort or LoadBalancer, not ClusterIP" }}
{{- end }}
{{- end }}
{{- end }}
{{- range $k := list "operatorToken" "brokerToken" }}
{{- $v := index $.Values.tokens $k }}
{{- if and $v (lt (len $v) 16) }}
{{- fail (printf "tokens.%s must be at least 16 characters" $k) }}
{{- end }}
{{- end }}
{{- end }}
