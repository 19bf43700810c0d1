{{/*
Kueue's controller configuration, the ConfigMap kueue-manager-config its Deployment
mounts. `gridloop bundle` keeps upstream's copy as a base
(upstream/kueue/bases/configmap-kueue-manager-config.yaml) instead of emitting it; this
renders it with what values decide: integrations.frameworks from kueue.integrations,
metrics.enableClusterQueueResources from kueue.metrics and waitForPodsReady (or, when
off, Kueue's DisableWaitForPodsReady gate) from kueue.waitForPodsReady. The rest (ports, leader election,
concurrency) stays upstream's, so it matches upstream's Deployment at the pinned version.
Empty when the chart has no Kueue manifests at all (templates/upstream.yaml says so).
*/}}
{{- define "gridloop.kueueConfigMap" -}}
{{- $path := "upstream/kueue/bases/configmap-kueue-manager-config.yaml" -}}
{{- $key := "controller_manager_config.yaml" -}}
{{- $text := .Files.Get $path -}}
{{- if $text -}}
{{- $base := $text | fromYaml -}}
{{- $config := (index ($base.data | default dict) $key) | default "" | fromYaml -}}
{{- if or (not $config) (hasKey $config "Error") -}}
{{- fail (printf "%s: no readable %s in it; rebuild the chart with \"gridloop bundle\"" $path $key) -}}
{{- end -}}
{{- $integrations := $config.integrations | default dict -}}
{{- $_ := set $integrations "frameworks" .Values.kueue.integrations -}}
{{- $_ = set $config "integrations" $integrations -}}
{{- $metrics := $config.metrics | default dict -}}
{{- $_ = set $metrics "enableClusterQueueResources" .Values.kueue.metrics.enableClusterQueueResources -}}
{{- $_ = set $config "metrics" $metrics -}}
{{- $wait := .Values.kueue.waitForPodsReady -}}
{{- if $wait.enabled -}}
{{- $_ = set $config "waitForPodsReady" (dict "timeout" $wait.timeout "blockAdmission" $wait.blockAdmission) -}}
{{- else -}}
{{- /* Kueue turns it on even without the block (since v0.19): only its gate turns it off */ -}}
{{- $_ = unset $config "waitForPodsReady" -}}
{{- $gates := $config.featureGates | default dict -}}
{{- $_ = set $gates "DisableWaitForPodsReady" true -}}
{{- $_ = set $config "featureGates" $gates -}}
{{- end -}}
{{- $_ = unset $base "data" -}}
{{- toYaml $base }}
data:
  {{ $key }}: |
    {{- toYaml $config | nindent 4 }}
{{- else if .Files.Glob "upstream/kueue/*.yaml" -}}
{{- fail (printf "kueue.enabled is true but this chart has no %s (Kueue's config, rendered from kueue.integrations): rebuild the chart with \"gridloop bundle\"" $path) -}}
{{- end -}}
{{- end -}}
