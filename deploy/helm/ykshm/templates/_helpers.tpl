{{/*
ykshm's helpers. Object names are fixed, as in YuniKorn's chart and deploy/kubernetes: the
admission controller, the web and the shim find each other by these names.
*/}}

{{/* YuniKorn's chart labels, beside each object's own `app` (app=yunikorn, as deploy/kubernetes). */}}
{{- define "ykshm.labels" -}}
chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
release: {{ .Release.Name }}
heritage: {{ .Release.Service }}
{{- end -}}

{{/* "repository:tag" of an image block ({repository, tag}), falling back to .Values.image and the
chart's appVersion. Called with (list $ BLOCK). */}}
{{- define "ykshm.image" -}}
{{- $root := index . 0 -}}
{{- $own := index . 1 | default dict -}}
{{- $repo := $own.repository | default $root.Values.image.repository -}}
{{- $tag := $own.tag | default $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- printf "%s:%s" $repo (toString $tag) -}}
{{- end -}}

{{/* The imagePullPolicy line of an image block, or nothing (the API server's default). */}}
{{- define "ykshm.pullPolicy" -}}
{{- $root := index . 0 -}}
{{- $own := index . 1 | default dict -}}
{{- with ($own.pullPolicy | default $root.Values.image.pullPolicy) }}
imagePullPolicy: {{ . }}
{{- end -}}
{{- end -}}

{{/* YuniKorn values ykshm cannot honour in a way that would still mean what the user asked: one
clear line instead of a silently different deployment. */}}
{{- define "ykshm.refuse" -}}
{{- if eq (toString .Values.enableWebService) "false" -}}
{{- fail "enableWebService=false is not supported: ykshm's web container also serves the REST API (/ws/v1) the admission controller and users reach" -}}
{{- end -}}
{{- if and .Values.ingress .Values.ingress.enabled -}}
{{- fail "ingress.enabled=true is not supported by this chart: expose the Service yunikorn-service (port service.port) with your own Ingress" -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets, as YuniKorn's chart: a list of Secret names. */}}
{{- define "ykshm.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}
