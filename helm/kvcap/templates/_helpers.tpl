{{/*
Chart name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "kvcap.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: release name + chart name, unless the release name already contains the chart name.
*/}}
{{- define "kvcap.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kvcap.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: only app.kubernetes.io/name and app.kubernetes.io/instance. A Deployment's selector cannot change
after creation, so it must never include labels that change between upgrades (version, chart).
*/}}
{{- define "kvcap.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvcap.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Common labels: the selector labels plus the ones that may change.
*/}}
{{- define "kvcap.labels" -}}
helm.sh/chart: {{ include "kvcap.chart" . }}
{{ include "kvcap.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kvcap
{{- end }}

{{- define "kvcap.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kvcap.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kvcap.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The Secret with the serving certificate (tls.crt/tls.key): cert-manager's, or an existing one. Empty: plain HTTP.
*/}}
{{- define "kvcap.tlsSecretName" -}}
{{- if .Values.webhook.certManager.enabled }}
{{- printf "%s-webhook-tls" (include "kvcap.fullname" .) }}
{{- else if .Values.webhook.tls.secretName }}
{{- .Values.webhook.tls.secretName }}
{{- end }}
{{- end }}

{{- define "kvcap.scheme" -}}
{{- if include "kvcap.tlsSecretName" . }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{- define "kvcap.portName" -}}
{{- if include "kvcap.tlsSecretName" . }}https{{ else }}http{{ end }}
{{- end }}

{{/*
Where the database URL and the API tokens come from: an existing Secret, or the one this chart renders.
*/}}
{{- define "kvcap.secretName" -}}
{{- include "kvcap.fullname" . }}
{{- end }}

{{- define "kvcap.databaseSecretName" -}}
{{- default (include "kvcap.secretName" .) .Values.database.existingSecret }}
{{- end }}

{{- define "kvcap.databaseSecretKey" -}}
{{- if .Values.database.existingSecret }}{{ .Values.database.existingSecretKey }}{{ else }}KVCAP_DATABASE_URL{{ end }}
{{- end }}

{{/*
Fails rendering when no database is configured: the default SQLite file cannot be shared by replicas and the root
filesystem is read-only.
*/}}
{{- define "kvcap.validateValues" -}}
{{- if and (not .Values.database.url) (not .Values.database.existingSecret) }}
{{- fail "kvcap: set database.url (postgresql+psycopg://USER:PASSWORD@HOST:5432/DB) or database.existingSecret" }}
{{- end }}
{{- if and .Values.webhook.enabled (not (include "kvcap.tlsSecretName" .)) }}
{{- fail "kvcap: the admission webhook needs HTTPS: set webhook.certManager.enabled=true or webhook.tls.secretName (+ webhook.tls.caBundle)" }}
{{- end }}
{{- if and .Values.webhook.enabled (not .Values.webhook.certManager.enabled) (not .Values.webhook.tls.caBundle) }}
{{- fail "kvcap: webhook.tls.caBundle is required when cert-manager is not used" }}
{{- end }}
{{- end }}

{{/*
Environment shared by the server and the migration Job: settings from the ConfigMap-equivalent values and the
database URL from a Secret.
*/}}
{{- define "kvcap.configEnv" -}}
KVCAP_LOG_LEVEL: {{ .Values.config.logLevel | quote }}
KVCAP_LOG_FORMAT: {{ .Values.config.logFormat | quote }}
KVCAP_SCRAPE_INTERVAL_SECONDS: {{ .Values.config.scrapeIntervalSeconds | quote }}
KVCAP_SCRAPE_TIMEOUT_SECONDS: {{ .Values.config.scrapeTimeoutSeconds | quote }}
KVCAP_SCRAPE_ALLOWED_HOSTS: {{ join "," .Values.config.scrapeAllowedHosts | quote }}
KVCAP_CATALOG_REFRESH_SECONDS: {{ .Values.config.catalogRefreshSeconds | quote }}
KVCAP_ADMISSION_MODE: {{ .Values.config.admissionMode | quote }}
KVCAP_ADMISSION_FAILURE_POLICY: {{ .Values.config.admissionFailurePolicy | quote }}
KVCAP_MAX_REQUEST_BODY_BYTES: {{ .Values.config.maxRequestBodyBytes | int64 | quote }}
{{- range $key, $value := .Values.config.extraEnv }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}
