{{/*
The vLLM pod of one model, shared by the Deployment (runtime vllm) and the KAITO
Workspace's custom template (runtime kaito). Weights stream from object storage with
the Run:ai model streamer straight into GPU memory; nothing is written to disk but
vLLM's caches and scratch files, which live in emptyDirs so the root filesystem stays
read-only. Call with (list $ model index).

The user is the one the image has. vLLM's docker/Dockerfile (vllm-base stage, "Non-root
support") creates `useradd --uid 2000 --gid 0 --create-home --home-dir /home/vllm vllm`,
and docs/deployment/docker.md ("Run as a non-root user") says the image "is also
prepared to run as the built-in vllm user (UID 2000, GID 0)". Any other uid has no
/etc/passwd entry, and torch's compile cache calls getpass.getuser() on import, which
fails with "KeyError: getpwuid(): uid not found" (vLLM issue #31959, KServe issue
#5666). The group is 2000, not upstream's 0: group 0 only matters for writing into the
image (/home/vllm, /opt/uv, /etc/passwd are group-0 writable there), and here the root
filesystem is read-only and every writable path is an emptyDir.
*/}}

{{/*
Where a model's weights are: "<uri>/<revision>/". `uri` is the folder holding the
model's revisions and `revision` names one of them, so a new revision always names new
weights and changing `revision` alone rolls the pods onto them. Fails, naming the
field, when the revision is not one path segment or the uri already ends with it.
Call with (list model index).
*/}}
{{- define "gridloop.modelWeights" -}}
{{- $m := index . 0 -}}
{{- $i := index . 1 -}}
{{- $revision := toString $m.revision -}}
{{- if or (not (regexMatch "^[A-Za-z0-9._-]+$" $revision)) (has $revision (list "." "..")) -}}
{{- fail (printf "inference.models[%d].revision: %q is not one path segment (letters, digits, '.', '_', '-'): the weights are streamed from <uri>/<revision>/" $i $revision) -}}
{{- end -}}
{{- $base := trimSuffix "/" $m.uri -}}
{{- if hasSuffix (printf "/%s" $revision) $base -}}
{{- fail (printf "inference.models[%d].uri: %q already ends with the revision %q; give the folder that holds the model's revisions, the chart streams <uri>/<revision>/" $i $m.uri $revision) -}}
{{- end -}}
{{- printf "%s/%s/" $base $revision -}}
{{- end -}}

{{/*
A model's tolerations as JSON: inference.tolerations (the GPU pools' taint) then the
model's own. Fails, naming the entry, on one that would tolerate the health service's
quarantine taint, by its key or as an empty key with operator Exists (every taint).
Call with (list $ model index).
*/}}
{{- define "gridloop.modelTolerations" -}}
{{- $ctx := index . 0 -}}
{{- $m := index . 1 -}}
{{- $i := index . 2 -}}
{{- $quarantine := include "gridloop.quarantineTaintKey" $ctx -}}
{{- $out := list -}}
{{- $sources := list (list "inference.tolerations" ($ctx.Values.inference.tolerations | default list)) (list (printf "inference.models[%d].tolerations" $i) ($m.tolerations | default list)) -}}
{{- range $source := $sources -}}
{{- range $j, $t := index $source 1 -}}
{{- $where := printf "%s[%d]" (index $source 0) $j -}}
{{- $key := $t.key | default "" -}}
{{- if eq $key $quarantine -}}
{{- fail (printf "%s: tolerates %s, the health service's quarantine taint: a model server must not run on a GPU node taken out of service" $where $quarantine) -}}
{{- end -}}
{{- if and (eq $key "") (eq ($t.operator | default "Equal") "Exists") -}}
{{- fail (printf "%s: an empty key with operator Exists tolerates every taint, %s (the health service's quarantine) too; name the taint's key" $where $quarantine) -}}
{{- end -}}
{{- $out = append $out $t -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The component of a model's labels, so each model's pods are selected on their own. */}}
{{- define "gridloop.modelComponent" -}}
{{- printf "model-%s" .name -}}
{{- end -}}

{{- define "gridloop.vllmPodTemplate" -}}
{{- $ctx := index . 0 -}}
{{- $m := index . 1 -}}
{{- $i := index . 2 -}}
{{- /* gpus (required by the schema) 0: a CPU build of vLLM, which asks for no GPU */ -}}
{{- $gpus := int $m.gpus -}}
{{- $resources := $m.resources | default $ctx.Values.inference.resources -}}
{{- /* KAITO's Service for a Workspace sends port 80 to the pod's 5000 (its inference
server's port); the chart's own Service sends 8000 to 8000 */ -}}
{{- $port := ternary 5000 8000 (eq ($m.runtime | default "vllm") "kaito") -}}
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
    # uid 2000: the image's own `vllm` user (see the top of this file).
    {{- include "gridloop.podSecurityContext" 2000 | nindent 4 }}
  {{- with $m.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with (include "gridloop.modelTolerations" (list $ctx $m $i) | fromJsonArray) }}
  # GPU pools are commonly tainted so only GPU work lands there; never the health
  # service's quarantine taint.
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: vllm
      image: {{ include "gridloop.image" (list $ctx ($m.image | default $ctx.Values.inference.image)) | quote }}
      imagePullPolicy: IfNotPresent
      # A server that exits (weights it cannot read, keys refused) leaves the tail of its
      # log as the container's termination message, so `kubectl describe` and
      # `gridloop status` say why a new revision is stuck.
      terminationMessagePolicy: FallbackToLogsOnError
      command: ["vllm", "serve"]
      args:
        - {{ include "gridloop.modelWeights" (list $m $i) | quote }}
        - --load-format
        - runai_streamer
        - --served-model-name
        - {{ $m.name | quote }}
        - --port
        - {{ $port | quote }}
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
        # The root filesystem is read-only: every path vLLM and its libraries write to is
        # under the emptyDir at /home/vllm (HOME of the image's vllm user in /etc/passwd),
        # /tmp or /dev/shm. Set explicitly so they hold whatever the runtime puts in HOME.
        - name: HOME
          value: /home/vllm
        # getpass.getuser() reads USER before it asks /etc/passwd (torch's inductor cache
        # names its folder after the user), so even an image without uid 2000 starts.
        - name: USER
          value: vllm
        # vllm/envs.py: VLLM_CACHE_ROOT defaults to $XDG_CACHE_HOME/vllm (torch.compile
        # and Triton artifacts, and VLLM_ASSETS_CACHE, where the Run:ai streamer's
        # ObjectStorageModel pulls config.json and the tokenizer); FlashInfer's JIT,
        # Triton (~/.triton), Outlines and Numba caches default under HOME too.
        - name: XDG_CACHE_HOME
          value: /home/vllm/.cache
        - name: VLLM_CACHE_ROOT
          value: /home/vllm/.cache/vllm
        # vllm/envs.py: VLLM_CONFIG_ROOT defaults to $XDG_CONFIG_HOME/vllm (usage_stats.json
        # and the do_not_track file).
        - name: XDG_CONFIG_HOME
          value: /home/vllm/.config
        - name: VLLM_CONFIG_ROOT
          value: /home/vllm/.config/vllm
        # Hugging Face's cache (tokenizer and config look-ups when not offline).
        - name: HF_HOME
          value: /home/vllm/.cache/huggingface
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
          containerPort: {{ $port }}
          protocol: TCP
      # A replaced pod stays in its Service's endpoints until kube-proxy on every node has
      # dropped it: it serves on through that window before vLLM is told to stop (and
      # then finishes the requests in flight), so a roll loses no request.
      lifecycle:
        preStop:
          sleep:
            seconds: 10
      startupProbe:
        httpGet:
          path: /health
          port: http
        # Streaming a large model can take minutes: allow up to 30 before giving up. Asked
        # every 2 s, a started server is Ready a second after it answers on average, not 5.
        periodSeconds: 2
        failureThreshold: 900
      readinessProbe:
        httpGet:
          path: /health
          port: http
        periodSeconds: 5
        failureThreshold: 3
      resources:
        requests:
          {{- toYaml $resources.requests | nindent 10 }}
          {{- if gt $gpus 0 }}
          nvidia.com/gpu: {{ $gpus | quote }}
          {{- end }}
        limits:
          {{- toYaml $resources.limits | nindent 10 }}
          {{- if gt $gpus 0 }}
          nvidia.com/gpu: {{ $gpus | quote }}
          {{- end }}
      securityContext:
        {{- include "gridloop.containerSecurityContext" . | nindent 8 }}
      volumeMounts:
        - name: shm
          mountPath: /dev/shm
        - name: home
          mountPath: /home/vllm
        - name: tmp
          mountPath: /tmp
  volumes:
    # NCCL and PyTorch share tensors between GPU workers through /dev/shm.
    - name: shm
      emptyDir:
        medium: Memory
        sizeLimit: {{ $m.shmSize | default "8Gi" | quote }}
    # HOME: ~/.cache (vLLM, Hugging Face, FlashInfer, Triton's ~/.triton) and ~/.config.
    - name: home
      emptyDir: {}
    # tempfile.gettempdir(): vLLM's IPC sockets (VLLM_RPC_BASE_PATH) and torch inductor's
    # default cache (/tmp/torchinductor_<user>).
    - name: tmp
      emptyDir: {}
{{- end -}}
