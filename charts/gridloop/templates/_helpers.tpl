{{/*
Names, labels and the secure defaults every gridloop-owned workload shares.
Every helper is prefixed gridloop.; names are cut to 63 characters (the limit of a
DNS label and of a label value).
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "gridloop.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>", or just the release when it already contains the chart name. */}}
{{- define "gridloop.fullname" -}}
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

{{/* "<fullname>-<suffix>", cut to 63 characters. Call with (list $ "suffix"). */}}
{{- define "gridloop.componentName" -}}
{{- $ctx := index . 0 -}}
{{- printf "%s-%s" (include "gridloop.fullname" $ctx) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "name-version" for the helm.sh/chart label. */}}
{{- define "gridloop.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels: only app.kubernetes.io/name and app.kubernetes.io/instance, the two
that never change on upgrade (selectors are immutable). Call with (list $ "component"):
a workload's name label is "<chart>-<component>" so the chart's Deployments never
select each other's pods; with (list $ "") it is the chart name.
*/}}
{{- define "gridloop.selectorLabels" -}}
{{- $ctx := index . 0 -}}
{{- $component := index . 1 -}}
{{- $name := include "gridloop.name" $ctx -}}
app.kubernetes.io/name: {{ (ternary $name (printf "%s-%s" $name $component) (empty $component)) | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/instance: {{ $ctx.Release.Name | quote }}
{{- end -}}

{{/* All labels of an object. Call with (list $ "component"), component may be "". */}}
{{- define "gridloop.labels" -}}
{{- $ctx := index . 0 -}}
{{- $component := index . 1 -}}
helm.sh/chart: {{ include "gridloop.chart" $ctx | quote }}
{{ include "gridloop.selectorLabels" . }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $ctx.Release.Service | quote }}
app.kubernetes.io/part-of: gridloop
{{- with $component }}
app.kubernetes.io/component: {{ . | trunc 63 | trimSuffix "-" | quote }}
{{- end }}
{{- end -}}

{{/* Labels of a ServiceMonitor, PodMonitor or PrometheusRule: ours plus monitoring.labels. */}}
{{- define "gridloop.monitoringLabels" -}}
{{- $ours := include "gridloop.labels" . | fromYaml -}}
{{- toYaml (merge $ours ((index . 0).Values.monitoring.labels | default dict)) -}}
{{- end -}}

{{/* The pod securityContext of every gridloop-owned workload. Call with the uid. */}}
{{- define "gridloop.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
fsGroup: {{ . }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The container securityContext of every gridloop-owned container. */}}
{{- define "gridloop.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- /*
The annotation on a namespace the chart creates for users' work (team and sandbox
namespaces): `helm uninstall` leaves it, and with it every Job, RayCluster and Sandbox
people made there; deleting it is for them to do.
*/ -}}
{{- define "gridloop.keptNamespace" -}}
helm.sh/resource-policy: keep
{{- end }}

{{- /*
A whole number of GiB as Kubernetes writes the quantity back (its canonical form: the
largest binary unit that divides it, 16384 -> 16Ti), so a ClusterQueue read back from a
Kueue webhook (which stores quantities that way) or diffed by `--dry-run` shows no change.
*/ -}}
{{- define "gridloop.gibibytes" -}}
{{- $n := int . -}}
{{- $units := list "Gi" "Ti" "Pi" "Ei" -}}
{{- $unit := 0 -}}
{{- range $_ := until 3 -}}
{{- if and (gt $n 0) (eq (mod $n 1024) 0) -}}
{{- $n = div $n 1024 -}}
{{- $unit = add1 $unit -}}
{{- end -}}
{{- end -}}
{{- if eq $n 0 -}}0{{- else -}}{{ printf "%d%s" $n (index $units $unit) }}{{- end -}}
{{- end }}

{{/* The namespace of the release. */}}
{{- define "gridloop.namespace" -}}
{{- .Release.Namespace -}}
{{- end -}}

{{/* The RuntimeClasses allowed in sandbox namespaces, as a JSON list: the configured
ones, plus kata when agentSandbox.kata.enabled. */}}
{{- define "gridloop.allowedRuntimeClasses" -}}
{{- $allowed := .Values.agentSandbox.allowedRuntimeClasses | default list -}}
{{- if and .Values.agentSandbox.kata.enabled (not (has "kata" $allowed)) -}}
{{- $allowed = append $allowed "kata" -}}
{{- end -}}
{{- toJson $allowed -}}
{{- end -}}

{{/* An image reference, from imageRegistry when that is set (air-gapped clusters):
"<imageRegistry>/<image>", the image as dist/images.txt lists it, and "<image>@sha256:..."
when the bundle pinned its digest (gridloop bundle --digests-from). Call with (list $ "image"). */}}
{{- define "gridloop.image" -}}
{{- $ctx := index . 0 -}}
{{- $image := index . 1 -}}
{{- with index (include "gridloop.imageDigests" $ctx | fromJson) $image -}}
{{- $image = printf "%s@%s" $image . -}}
{{- end -}}
{{- with $ctx.Values.imageRegistry -}}
{{- printf "%s/%s" (trimSuffix "/" .) $image -}}
{{- else -}}
{{- $image -}}
{{- end -}}
{{- end -}}

{{- /*
Upstream manifest text (list $ text) with systemNodes' nodeSelector and tolerations added
to every Deployment's pod template, beside whatever upstream set (upstream's own
nodeSelector keys win). Other documents are passed through as they were.
*/ -}}
{{- define "gridloop.onSystemNodes" -}}
{{- $root := index . 0 }}
{{- $selector := include "gridloop.systemNodeSelector" $root | fromJson }}
{{- $placement := dict "nodeSelector" $selector "tolerations" $root.Values.systemNodes.tolerations }}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" (index . 1) -1 }}
{{- $obj := fromYaml $doc }}
{{- if and $obj (eq (get $obj "kind") "Deployment") }}
{{- $pod := $obj.spec.template.spec }}
{{- $merged := merge (deepCopy ($pod.nodeSelector | default dict)) $placement.nodeSelector }}
{{- if $merged }}
{{- $_ := set $pod "nodeSelector" $merged }}
{{- end }}
{{- $tolerations := concat ($pod.tolerations | default list) $placement.tolerations }}
{{- if $tolerations }}
{{- $_ := set $pod "tolerations" $tolerations }}
{{- end }}
---
{{ toYaml $obj }}
{{- else if trim $doc }}
---
{{- $doc }}
{{- end }}
{{- end }}
{{- end }}

{{- /*
Kueue's webhooks for pods, Deployments and StatefulSets fail open unless kueue.integrations
has that kind, as Kueue's own Helm chart renders them. Upstream's manifests make them fail
closed in every namespace but kube-system and kueue-system: while Kueue's pod is down (its
node lost, a rollout) no pod, Deployment or StatefulSet could be created anywhere else,
gridloop's health service and model servers included, though Kueue manages none of them.

The webhooks of Kueue's own configuration kinds (ClusterQueue, ResourceFlavor, Cohort)
fail open for the objects this chart renders (label gridloop.kueueFailOpenLabel) and stay
closed for everyone else's: a plain `helm install` creates Kueue and its queues in one
go, before Kueue's webhook answers, and would be refused. Each such webhook gets a copy
named <name>.gridloop.kb.io (same service and rules) for the labelled objects, with
failurePolicy Ignore; the original skips them. What is skipped for them while Kueue is
down: its defaulting adds only the kueue.x-k8s.io/resource-in-use finalizer, which the
chart renders itself, and its validation of objects the chart built from checked values.
Call with (list $ text): `text` is Kueue's upstream manifests, the other documents verbatim.
*/ -}}
{{- define "gridloop.kueueWebhookPolicies" -}}
{{- $root := index . 0 }}
{{- $optional := list "pod" "deployment" "statefulset" }}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" (index . 1) -1 }}
{{- /* only the two webhook configurations are parsed: the rest pass as text */ -}}
{{- $obj := dict }}
{{- if regexMatch "(?m)^kind: (Mutating|Validating)WebhookConfiguration\\s*$" $doc }}
{{- $obj = fromYaml $doc }}
{{- end }}
{{- if and $obj (has (get $obj "kind") (list "MutatingWebhookConfiguration" "ValidatingWebhookConfiguration")) }}
{{- $label := include "gridloop.kueueFailOpenLabel" $root }}
{{- $webhooks := list }}
{{- range $w := $obj.webhooks }}
{{- $kind := regexReplaceAll "^[mv]([a-z]+)[.]kb[.]io$" $w.name "${1}" }}
{{- if and (has $kind $optional) (not (has $kind $root.Values.kueue.integrations)) }}
{{- $_ := set $w "failurePolicy" "Ignore" }}
{{- end }}
{{- if has $kind (list "clusterqueue" "resourceflavor" "cohort") }}
{{- $ours := deepCopy $w }}
{{- $_ := set $ours "name" (regexReplaceAll "[.]kb[.]io$" $w.name ".gridloop.kb.io") }}
{{- $_ := set $ours "failurePolicy" "Ignore" }}
{{- $_ := set $ours "objectSelector" (dict "matchExpressions" (list (dict "key" $label "operator" "Exists"))) }}
{{- $selector := $w.objectSelector | default dict }}
{{- $_ := set $selector "matchExpressions" (append ($selector.matchExpressions | default list) (dict "key" $label "operator" "DoesNotExist")) }}
{{- $_ := set $w "objectSelector" $selector }}
{{- $webhooks = append $webhooks $w }}
{{- $webhooks = append $webhooks $ours }}
{{- else }}
{{- $webhooks = append $webhooks $w }}
{{- end }}
{{- end }}
{{- $_ := set $obj "webhooks" $webhooks }}
---
{{ toYaml $obj }}
{{- else if trim $doc }}
---
{{- $doc }}
{{- end }}
{{- end }}
{{- end }}

{{- /*
systemNodes.nodeSelector as JSON, without the labels a later values file set to null
(Helm keeps a user's null when the chart's defaults do not have the key; here it means
"drop the label a profile set", e.g. the local profile's on a kwok-only cluster).
*/ -}}
{{- define "gridloop.systemNodeSelector" -}}
{{- $out := dict }}
{{- range $k, $v := .Values.systemNodes.nodeSelector }}
{{- if not (kindIs "invalid" $v) }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{- /*
Why the bundle left an upstream component out (its upstream/<dir>/LEFT-OUT file, written
by `gridloop bundle --skip` or by `gridloop render`/`install` when it could not be
fetched), or "" when it did not. Call with (list $ "<dir>").
*/ -}}
{{- define "gridloop.leftOut" -}}
{{- $root := index . 0 -}}
{{- (($root.Files.Get (printf "upstream/%s/LEFT-OUT" (index . 1))) | default "") | trim -}}
{{- end }}

{{- /*
The label on the Kueue configuration objects this chart renders, for which Kueue's own
webhooks fail open (gridloop.kueueWebhookPolicies).
*/ -}}
{{- define "gridloop.kueueFailOpenLabel" -}}
gridloop.io/kueue-webhooks-fail-open
{{- end }}

{{- /*
The upstream components `gridloop bundle` adds, as JSON: each one's values key, its
folder under upstream/ (and name in versions.yaml) and its title. upstream.yaml emits
them; NOTES.txt says which the bundle left out.
*/ -}}
{{- define "gridloop.upstreamComponents" -}}
{{- list
  (dict "key" "kueue" "dir" "kueue" "title" "Kueue")
  (dict "key" "kuberay" "dir" "kuberay" "title" "KubeRay")
  (dict "key" "kaito" "dir" "kaito" "title" "KAITO")
  (dict "key" "agentSandbox" "dir" "agent-sandbox" "title" "agent-sandbox")
  | toJson }}
{{- end }}

{{/* The digests `gridloop bundle --digests-from` found, as JSON: {"<image>": "sha256:..."}
(upstream/digests.yaml; {} for a chart bundled without it). */}}
{{- define "gridloop.imageDigests" -}}
{{- toJson ((.Files.Get "upstream/digests.yaml" | fromYaml).images | default dict) -}}
{{- end -}}
