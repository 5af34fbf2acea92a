{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "gpuroster.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects. Kept to 52 characters so that suffixed
names (<fullname>-scheduler-config, ...) stay DNS labels.
*/}}
{{- define "gpuroster.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpuroster.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object: `helm uninstall` leaves nothing with these. */}}
{{- define "gpuroster.labels" -}}
helm.sh/chart: {{ include "gpuroster.chart" . }}
{{ include "gpuroster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuroster
{{- end }}

{{- define "gpuroster.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuroster.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The extender + controller (gpuroster serve). */}}
{{- define "gpuroster.extender.selectorLabels" -}}
{{ include "gpuroster.selectorLabels" . }}
app.kubernetes.io/component: extender
{{- end }}

{{/* The second kube-scheduler. */}}
{{- define "gpuroster.scheduler.selectorLabels" -}}
{{ include "gpuroster.selectorLabels" . }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "gpuroster.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpuroster.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpuroster.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "gpuroster.fullname" .) }}
{{- end }}

{{- define "gpuroster.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
kube-scheduler image. The tag defaults to the cluster's version reduced to
vMAJOR.MINOR.PATCH: registry.k8s.io has no image for build metadata such as
"+k3s1" or "-eks-...".
*/}}
{{- define "gpuroster.scheduler.image" -}}
{{- $img := .Values.scheduler.image }}
{{- $tag := $img.tag }}
{{- if not $tag }}
{{- $v := semver .Capabilities.KubeVersion.Version }}
{{- $tag = printf "v%d.%d.%d" $v.Major $v.Minor $v.Patch }}
{{- end }}
{{- printf "%s/%s:%s" $img.registry $img.repository $tag }}
{{- end }}

{{/* true when gpuroster replicas must elect a leader (never in shadow mode: a Lease is a write). */}}
{{- define "gpuroster.leaderElect" -}}
{{- $e := .Values.leaderElection.enabled }}
{{- if .Values.shadow }}
{{- false }}
{{- else if kindIs "bool" $e }}
{{- $e }}
{{- else }}
{{- gt (int .Values.replicaCount) 1 }}
{{- end }}
{{- end }}

{{- define "gpuroster.leaseName" -}}
{{- default (include "gpuroster.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{- define "gpuroster.scheduler.leaseName" -}}
{{- include "gpuroster.scheduler.fullname" . }}
{{- end }}

{{- define "gpuroster.scheme" -}}
{{- if .Values.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/* Where kube-scheduler reaches the extender. */}}
{{- define "gpuroster.extender.urlPrefix" -}}
{{- if .Values.scheduler.extender.urlPrefix }}
{{- .Values.scheduler.extender.urlPrefix }}
{{- else }}
{{- printf "%s://%s.%s.svc:%d" (include "gpuroster.scheme" .) (include "gpuroster.fullname" .) .Release.Namespace (int .Values.service.port) }}
{{- end }}
{{- end }}

{{/* The extenders: list of a KubeSchedulerConfiguration (v1). */}}
{{- define "gpuroster.extenders" -}}
{{- $caFile := .caFile }}
{{- with .root }}
# Top level: kube-scheduler sends every profile's GPU pods here.
extenders:
  - urlPrefix: {{ include "gpuroster.extender.urlPrefix" . | quote }}
    filterVerb: filter
    prioritizeVerb: prioritize
    {{- if .Values.shadow }}
    # Shadow mode: gpuroster binds nothing (kube-scheduler binds), and a GPU pod
    # never waits on it: if it is down, the scheduler goes on without it.
    ignorable: true
    {{- else }}
    bindVerb: bind
    ignorable: false
    {{- end }}
    weight: {{ .Values.scheduler.extender.weight }}
    httpTimeout: {{ .Values.scheduler.extender.httpTimeout | quote }}
    nodeCacheCapable: true
    managedResources:
      - name: nvidia.com/gpu
        ignoredByScheduler: false
    {{- if .Values.tls.enabled }}
    enableHTTPS: true
    tlsConfig:
      insecure: false
      caFile: {{ $caFile | quote }}
    {{- end }}
{{- end }}
{{- end }}

{{/* Mount path of the TLS Secret in both pods. */}}
{{- define "gpuroster.tlsDir" -}}
/etc/gpuroster/tls
{{- end }}

{{- define "gpuroster.validate" -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled is true but tls.secretName is empty: name the Secret holding tls.crt, tls.key and ca.crt" }}
{{- end }}
{{- if not (hasKey .Values.config.priorityClasses (toString .Values.config.defaultPriority)) }}
{{- fail (printf "config.defaultPriority %q is not a class in config.priorityClasses (%s)" (toString .Values.config.defaultPriority) (keys .Values.config.priorityClasses | sortAlpha | join ", ")) }}
{{- end }}
{{- range $class, $_ := .Values.config.priorityClassValues }}
{{- if not (hasKey $.Values.config.priorityClasses $class) }}
{{- fail (printf "config.priorityClassValues: %q is not a class in config.priorityClasses (%s)" $class (keys $.Values.config.priorityClasses | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}
{{- end }}

{{/* PodDisruptionBudget spec: minAvailable when set, else maxUnavailable. */}}
{{- define "gpuroster.pdbSpec" -}}
{{- if not (kindIs "invalid" .minAvailable) }}
minAvailable: {{ if kindIs "string" .minAvailable }}{{ .minAvailable | quote }}{{ else }}{{ .minAvailable }}{{ end }}
{{- else }}
{{- $max := .maxUnavailable | default 1 }}
maxUnavailable: {{ if kindIs "string" $max }}{{ $max | quote }}{{ else }}{{ $max }}{{ end }}
{{- end }}
{{- end }}

{{/* Prefix of cluster-scoped names: unique per release and namespace. */}}
{{- define "gpuroster.clusterScopedName" -}}
{{- printf "%s-%s" (include "gpuroster.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
What the controller and extender do to namespaced objects, and nothing more:
read and patch pods (annotations, conditions), bind them, record events,
read and scale real-time Deployments, read demand ConfigMaps.
*/}}
{{- define "gpuroster.workloadRules" -}}
{{- if .Values.shadow }}
# Shadow mode: read only. gpuroster plans from what it reads and writes nothing.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
{{- else }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: [""]
  resources: ["pods/binding"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# Moving a real-time replica to where the plan holds its GPUs (a gang took the old
# ones): the Eviction API, so PodDisruptionBudgets are honoured. Never a plain delete.
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create"]
{{- end }}
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch"]
{{- if not .Values.shadow }}
- apiGroups: ["apps"]
  resources: ["deployments/scale"]
  verbs: ["get", "patch"]
{{- end }}
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch"]
{{- if and (eq .Values.gpus "dra") (not .Values.shadow) }}
# DRA mode: the allocation of an admitted gang's claims (read cluster-wide).
# the finalizer kube-scheduler also puts on a claim it allocates
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims"]
  verbs: ["patch"]
- apiGroups: ["resource.k8s.io"]
  resources: ["resourceclaims/status"]
  verbs: ["patch"]
{{- end }}
{{- end }}

{{/* The second scheduler's whole KubeSchedulerConfiguration. */}}
{{- define "gpuroster.scheduler.config" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: {{ .Values.scheduler.leaderElection.enabled }}
  {{- if .Values.scheduler.leaderElection.enabled }}
  resourceLock: leases
  resourceName: {{ include "gpuroster.scheduler.leaseName" . }}
  resourceNamespace: {{ .Release.Namespace }}
  {{- end }}
# The extender must see every feasible node to place a block where the plan put it.
percentageOfNodesToScore: 100
# The plan decides when a GPU pod may bind; backoff would only delay a due gang.
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
profiles:
  - schedulerName: {{ .Values.scheduler.schedulerName }}
{{- include "gpuroster.extenders" (dict "root" . "caFile" (printf "%s/ca.crt" (include "gpuroster.tlsDir" .))) }}
{{- end }}
