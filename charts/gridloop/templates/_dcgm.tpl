{{- /*
Helpers of the DCGM exporter (templates/dcgm-exporter.yaml): what it must always
tolerate, the environment variables only the chart sets, and the value combinations it
refuses.
*/ -}}

{{- /*
The health service's quarantine taint (gridloop.quarantineTaintKey, generated from
installer/gridloop/names.py), tolerated with any
effect, NoExecute included (spec.quarantine.noExecute). The health service releases a
quarantined node only after its GPUs look healthy for spec.release.holdDown, and it sees
them only through this exporter: an exporter kept off or evicted from quarantined nodes
would keep every quarantined node out forever. Not a value: a tolerations list a user
replaces must not drop it. The cordon's own taint (node.kubernetes.io/unschedulable) is
tolerated by every DaemonSet pod already.
*/ -}}
{{- define "gridloop.dcgmQuarantineToleration" -}}
key: {{ include "gridloop.quarantineTaintKey" . }}
operator: Exists
{{- end -}}

{{- /*
The variables the chart sets on the exporter, and what sets each (dcgmExporter.extraEnv
may not name them: a second entry would silently win or lose).
*/ -}}
{{- define "gridloop.dcgmChartEnv" -}}
NODE_NAME: "the exporter's host label, the node's name from spec.nodeName"
DCGM_EXPORTER_NO_HOSTNAME: "the health service ties GPU series to nodes by the host label"
DCGM_EXPORTER_LISTEN: "the metrics port the Service and probes use"
DCGM_EXPORTER_COLLECTORS: "dcgmExporter.counters"
DCGM_EXPORTER_KUBERNETES: "pod attribution, always on"
DCGM_POD_RESOURCES_KUBELET_SOCKET: "dcgmExporter.podResources.hostPath"
DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE: "dcgmExporter.podResources.gpuIdType"
NVIDIA_RESOURCE_NAMES: "dcgmExporter.podResources.resourceNames"
NO_SETCAP: "the exporter runs as root, whose capabilities need no file capability"
{{- end -}}

{{- /*
Fails, naming the value, on what the schema cannot see. Call with the root context.
*/ -}}
{{- define "gridloop.dcgmExporterChecks" -}}
{{- $d := .Values.dcgmExporter -}}
{{- if not $d.counters.enabled -}}
{{- fail "dcgmExporter.enabled is true but dcgmExporter.counters.enabled is false: the exporter DaemonSet reads its counters from that ConfigMap; turn it on" -}}
{{- end -}}
{{- if and (not $d.nodeSelector) (not $d.affinity) -}}
{{- fail "dcgmExporter.nodeSelector is empty and dcgmExporter.affinity sets nothing: the exporter would run on every node and fail on those without a GPU; keep nvidia.com/gpu.present: \"true\" or name the label your GPU nodes carry" -}}
{{- end -}}
{{- with $d.serviceMonitor.namespace -}}
{{- if ne . $.Release.Namespace -}}
{{- fail (printf "dcgmExporter.serviceMonitor.namespace is %q, but the chart's exporter runs in the release namespace %q: leave it empty (it is for an exporter installed by other means, with dcgmExporter.enabled=false)" . $.Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- if not $d.profiling -}}
{{- range $i, $line := $d.counters.extra -}}
{{- if hasPrefix "DCGM_FI_PROF_" $line -}}
{{- fail (printf "dcgmExporter.counters.extra[%d]: %s is a profiling metric, which needs CAP_SYS_ADMIN: set dcgmExporter.profiling=true (docs/security.md says what it grants)" $i (regexFind "^[A-Z0-9_]+" $line)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $reserved := include "gridloop.dcgmChartEnv" . | fromYaml -}}
{{- range $i, $e := $d.extraEnv -}}
{{- if hasKey $reserved $e.name -}}
{{- fail (printf "dcgmExporter.extraEnv[%d].name: %s is set by the chart (%s)" $i $e.name (get $reserved $e.name)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
