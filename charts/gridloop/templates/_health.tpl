{{/*
The health policy, read once here for the service's ConfigMap, the alerts (which XIDs
are in the quarantine class) and NOTES.txt's warnings. The service itself validates
the policy when it starts; the chart only reads the few fields it needs.
*/}}

{{/* The policy file's text: health.policy, or the shipped files/health.yaml. */}}
{{- define "gridloop.healthPolicyText" -}}
{{- $text := .Values.health.policy | default (.Files.Get "files/health.yaml") -}}
{{- if not $text -}}
{{- fail "files/health.yaml is missing from the chart (it is a symlink to policies/health.yaml; package the chart with `helm package` or `gridloop bundle`, which follow it), or set health.policy" -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* The policy as a map; fails with one line when health.policy is not a YAML mapping. */}}
{{- define "gridloop.healthPolicy" -}}
{{- $policy := include "gridloop.healthPolicyText" . | fromYaml -}}
{{- if hasKey $policy "Error" -}}
{{- fail (printf "health.policy: not a YAML mapping: %s" (get $policy "Error")) -}}
{{- end -}}
{{- toJson $policy -}}
{{- end -}}

{{/*
The XID codes that quarantine a node at once, as a JSON list: the policy's
spec.xid.quarantine (the shipped list when the policy leaves it out), with
spec.xid.overrides applied.
*/}}
{{- define "gridloop.quarantineXids" -}}
{{- $policy := include "gridloop.healthPolicy" . | fromJson -}}
{{- $shipped := .Files.Get "files/health.yaml" | fromYaml -}}
{{- $xid := dig "spec" "xid" dict $policy -}}
{{- $codes := list -}}
{{- range (hasKey $xid "quarantine" | ternary $xid.quarantine (dig "spec" "xid" "quarantine" list $shipped)) -}}
{{- $codes = append $codes (int .) -}}
{{- end -}}
{{- range $code, $action := ($xid.overrides | default dict) -}}
{{- $codes = without $codes (int $code) -}}
{{- if eq $action "quarantine" -}}
{{- $codes = append $codes (int $code) -}}
{{- end -}}
{{- end -}}
{{- toJson $codes -}}
{{- end -}}
