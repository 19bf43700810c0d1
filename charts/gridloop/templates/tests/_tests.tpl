{{- /*
What the `helm test` hooks share (test-health.yaml, test-policies.yaml). Each test is a
Pod running `gridloop selftest ...` in gridloop's own image, the health service's image
and pull policy (health.image), placed where the health service runs and locked down as
every gridloop container is. Its lines are in `helm test --logs`. Bare Pods, not Jobs:
on the local cluster's simulated nodes kwok completes a Job's pod without running it,
while a bare pod there never succeeds, so a test cannot pass without having run.
*/ -}}

{{/* The image the test pods run: exactly the health service Deployment's. */}}
{{- define "gridloop.testImage" -}}
{{- $image := .Values.health.image -}}
{{- include "gridloop.image" (list . (printf "%s:%s" $image.repository ($image.tag | default .Chart.AppVersion))) -}}
{{- end -}}

{{/*
The annotations of a test hook. Call with the weight: lower ones are created first.
A passing test's objects are deleted; a failing one's pod stays for `kubectl logs` until
the next `helm test` (Helm deletes the hooks that ran before it, its RBAC included).
*/}}
{{- define "gridloop.testHook" -}}
helm.sh/hook: test
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}

{{/* The pod spec of a test, less its containers and ServiceAccount. */}}
{{- define "gridloop.testPodSpec" -}}
restartPolicy: Never
securityContext:
  {{- include "gridloop.podSecurityContext" 65532 | nindent 2 }}
{{- with merge (deepCopy .Values.health.nodeSelector) (include "gridloop.systemNodeSelector" . | fromJson) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with concat .Values.systemNodes.tolerations .Values.health.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: tmp
    emptyDir: {}
{{- end -}}

{{/* A test container's image, environment, resources and lock-down (name and command apart). */}}
{{- define "gridloop.testContainer" -}}
image: {{ include "gridloop.testImage" . | quote }}
imagePullPolicy: {{ .Values.health.image.pullPolicy }}
env:
  - name: PYTHONUNBUFFERED
    value: "1"
  # The root filesystem is read-only: no bytecode caches.
  - name: PYTHONDONTWRITEBYTECODE
    value: "1"
resources:
  {{- toYaml .Values.tests.resources | nindent 2 }}
securityContext:
  {{- include "gridloop.containerSecurityContext" . | nindent 2 }}
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{/*
The annotations of the pre-delete hook's objects (kueue-queues-pre-delete.yaml). Call
with the weight. Deleted once it succeeded; a failed pod stays for its logs (the
uninstall stops: `helm uninstall --no-hooks` skips it).
*/}}
{{- define "gridloop.preDeleteHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
