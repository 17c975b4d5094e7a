{{/*
Names are fixed, as in deploy/kubernetes: allset's code and config name its Lease, Service
and EndpointSlice `allset`, so one release per namespace.
*/}}

{{/* The labels of every object: the name the selectors use, and Helm's own. */}}
{{- define "allset.labels" -}}
app.kubernetes.io/name: allset
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/*
The release's namespace, which allset shares only with the CA it serves. Never
kube-system: allset's Role may create EndpointSlices in its namespace, which there could
route any of the cluster's own Services (kube-dns among them).
*/}}
{{- define "allset.namespace" -}}
{{- if eq .Release.Namespace "kube-system" -}}
{{- fail "allset does not install into kube-system: its Role may create EndpointSlices in its own namespace, which there could route kube-dns. Install into a namespace of its own (helm install -n allset --create-namespace) and run Cluster Autoscaler there too (docs/operator-guide.md)" -}}
{{- end -}}
{{- .Release.Namespace -}}
{{- end }}

{{- define "allset.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The server certificate's DNS names; CA's cloud-config dials the first. */}}
{{- define "allset.serverNames" -}}
- allset.{{ include "allset.namespace" . }}.svc
- allset.{{ include "allset.namespace" . }}.svc.cluster.local
- allset.{{ include "allset.namespace" . }}
- allset
- allset-webhook.{{ include "allset.namespace" . }}.svc
{{- end }}

{{/*
allset's config as text: values.config is a mapping, or the text of a config file
(`--set-file config=my-config.yaml`, kept as written).
*/}}
{{- define "allset.configText" -}}
{{- if kindIs "string" .Values.config -}}
{{ .Values.config }}
{{- else -}}
{{ toYaml .Values.config }}
{{- end -}}
{{- end }}

{{/*
The config's cloud.provider, after the checks the schema cannot make on a config given as
text: it parses, and names its cloud. The identity its cloud needs must be set.
*/}}
{{- define "allset.provider" -}}
{{- $config := include "allset.configText" . | fromYaml -}}
{{- if hasKey $config "Error" -}}
{{- fail (printf "config: not YAML: %s" $config.Error) -}}
{{- end -}}
{{- $provider := dig "cloud" "provider" "" $config -}}
{{- if not (has $provider (list "aws" "gcp" "fake")) -}}
{{- fail (printf "config: cloud.provider must be aws, gcp or fake, not %q (give allset's config as values.config, or --set-file config=<file>)" $provider) -}}
{{- end -}}
{{- if and (eq $provider "aws") (not .Values.aws.roleArn) (not .Values.aws.podIdentity) -}}
{{- fail "aws.roleArn: the config's cloud is aws, so allset needs an IAM role (IRSA: arn:aws:iam::<account>:role/<name>), or aws.podIdentity: true when EKS Pod Identity associates it (docs/operator-guide.md, step 3)" -}}
{{- end -}}
{{- if and (eq $provider "gcp") (not .Values.gcp.serviceAccount) -}}
{{- fail "gcp.serviceAccount: the config's cloud is gcp, so allset needs a Google service account (Workload Identity: <name>@<project>.iam.gserviceaccount.com; docs/operator-guide.md, step 3)" -}}
{{- end -}}
{{- if and .Values.simulatedNodes.enabled (or (ne $provider "fake") (not (dig "cloud" "fake" "registerNodes" false $config))) -}}
{{- fail "simulatedNodes.enabled: only with the simulated cloud registering Nodes (cloud.provider fake, cloud.fake.registerNodes true); never with real kubelets" -}}
{{- end -}}
{{- $provider -}}
{{- end }}
