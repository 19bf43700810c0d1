{{/*
The vLLM pod of one model, shared by the Deployment (runtime vllm) and the KAITO
Workspace's custom template (runtime kaito). Weights stream from object storage with
the Run:ai model streamer straight into GPU memory; nothing is written to disk but
vLLM's caches, which live in an emptyDir so the root filesystem stays read-only.
Call with (list $ model).
*/}}

{{/* The component of a model's labels, so each model's pods are selected on their own. */}}
{{- define "gridloop.modelComponent" -}}
{{- printf "model-%s" .name -}}
{{- end -}}

{{- define "gridloop.vllmPodTemplate" -}}
{{- $ctx := index . 0 -}}
{{- $m := index . 1 -}}
{{- $gpus := int ($m.gpus | default 1) -}}
{{- $resources := $m.resources | default $ctx.Values.inference.resources -}}
metadata:
  labels:
    {{- include "gridloop.labels" (list $ctx (include "gridloop.modelComponent" $m)) | nindent 4 }}
    gridloop.io/model: {{ $m.name | quote }}
  annotations:
    # A new revision changes the pod template, so the Deployment rolls to it.
    gridloop.io/model-revision: {{ $m.revision | quote }}
spec:
  automountServiceAccountToken: false
  securityContext:
    {{- include "gridloop.podSecurityContext" 1000 | nindent 4 }}
  {{- with $m.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: vllm
      image: {{ include "gridloop.image" (list $ctx ($m.image | default $ctx.Values.inference.image)) | quote }}
      imagePullPolicy: IfNotPresent
      command: ["vllm", "serve"]
      args:
        - {{ $m.uri | quote }}
        - --load-format
        - runai_streamer
        - --served-model-name
        - {{ $m.name | quote }}
        - --port
        - "8000"
        {{- if gt $gpus 1 }}
        - --tensor-parallel-size
        - {{ $gpus | quote }}
        {{- end }}
        {{- range $m.extraArgs }}
        - {{ . | quote }}
        {{- end }}
      env:
        - name: RUNAI_STREAMER_CONCURRENCY
          value: {{ (dig "concurrency" 16 ($m.streamer | default dict)) | int | quote }}
        {{- with (dig "endpoint" "" ($m.s3 | default dict)) }}
        - name: AWS_ENDPOINT_URL
          value: {{ . | quote }}
        - name: AWS_EC2_METADATA_DISABLED
          value: "true"
        - name: RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING
          value: {{ ternary "1" "0" (dig "virtualAddressing" false ($m.s3 | default dict)) | quote }}
        {{- end }}
        # Caches go to the writable emptyDir; the root filesystem is read-only.
        - name: HOME
          value: /cache
        - name: XDG_CACHE_HOME
          value: /cache
        - name: HF_HOME
          value: /cache/huggingface
        - name: VLLM_CACHE_ROOT
          value: /cache/vllm
        {{- if $ctx.Values.inference.offline }}
        # inference.offline: no Hugging Face Hub look-ups, no usage statistics sent out.
        - name: HF_HUB_OFFLINE
          value: "1"
        - name: VLLM_NO_USAGE_STATS
          value: "1"
        - name: DO_NOT_TRACK
          value: "1"
        {{- end }}
      {{- with $m.credentialsSecret }}
      envFrom:
        - secretRef:
            name: {{ . | quote }}
      {{- end }}
      ports:
        - name: http
          containerPort: 8000
          protocol: TCP
      startupProbe:
        httpGet:
          path: /health
          port: http
        # Streaming a large model can take minutes: allow up to 30 before giving up.
        periodSeconds: 10
        failureThreshold: 180
      readinessProbe:
        httpGet:
          path: /health
          port: http
        periodSeconds: 5
        failureThreshold: 3
      resources:
        requests:
          {{- toYaml $resources.requests | nindent 10 }}
          nvidia.com/gpu: {{ $gpus | quote }}
        limits:
          {{- toYaml $resources.limits | nindent 10 }}
          nvidia.com/gpu: {{ $gpus | quote }}
      securityContext:
        {{- include "gridloop.containerSecurityContext" . | nindent 8 }}
      volumeMounts:
        - name: shm
          mountPath: /dev/shm
        - name: cache
          mountPath: /cache
        - name: tmp
          mountPath: /tmp
  volumes:
    # NCCL and PyTorch share tensors between GPU workers through /dev/shm.
    - name: shm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $m.shmSize | default "8Gi" | quote }}
    - name: cache
      emptyDir: {}
    - name: tmp
      emptyDir: {}
{{- end -}}
