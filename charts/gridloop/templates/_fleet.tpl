{{/*
The fleet, as Kueue sees it. `fleet` in values has the fleet file's shape (checked by
values.schema.json); this file turns it into resource flavors and team quotas. The
facts behind a GPU model name come from the catalog in _generated.tpl, generated from
installer/gridloop/fleet/catalog.py.
*/}}

{{/*
Every pool of the fleet as a flavor: the container nodes' CPU pool first (when the fleet
has containerNodes), then the GPU pools, cloud sites in listed order, then on-prem sites:
{flavors: [{name, site, pool, product, gpus, cpu, memoryGi, container}]}. For a GPU pool,
cpu and memoryGi are the pool's whole CPU and memory, scaled from the catalog's 8-GPU
node as the simulator does; for the CPU pool ("system", container: true), what the fleet
file says Kueue may admit on its nodes (containerNodes.cpuCores and memoryGi per node).
The CPU pool comes first so work that asks for no GPU lands on the nodes that have no
GPU; a GPU job finds no GPU quota there and takes the next flavor.
Fails, naming the field, on what the schema cannot check: duplicate names and node names
longer than 63 characters.
*/}}
{{- define "gridloop.fleetFlavors" -}}
{{- $catalog := include "gridloop.gpuCatalog" . | fromYaml -}}
{{- $sites := .Values.fleet.sites | default list -}}
{{- $seenSites := dict -}}
{{- $seenFlavors := dict -}}
{{- range $s, $site := $sites -}}
  {{- if hasKey $seenSites $site.name -}}
    {{- fail (printf "fleet.sites[%d].name: duplicate site name %q (also sites[%v])" $s $site.name (get $seenSites $site.name)) -}}
  {{- end -}}
  {{- $_ := set $seenSites $site.name (toString $s) -}}
  {{- $seenPools := dict -}}
  {{- range $p, $pool := $site.pools -}}
    {{- $where := printf "fleet.sites[%d].pools[%d].name" $s $p -}}
    {{- if hasKey $seenPools $pool.name -}}
      {{- fail (printf "%s: duplicate pool name %q in site %q" $where $pool.name $site.name) -}}
    {{- end -}}
    {{- $_ := set $seenPools $pool.name true -}}
    {{- $flavor := printf "%s-%s" $site.name $pool.name -}}
    {{- if hasKey $seenFlavors $flavor -}}
      {{- fail (printf "%s: node names %s-NNN collide with %s" $where $flavor (get $seenFlavors $flavor)) -}}
    {{- end -}}
    {{- $_ := set $seenFlavors $flavor (printf "sites[%d].pools[%d]" $s $p) -}}
    {{- $longest := printf "%s-%03d" $flavor (max 0 (sub (int $pool.nodes) 1)) -}}
    {{- if gt (len $longest) 63 -}}
      {{- fail (printf "%s: node name %q would be %d characters (at most 63); shorten the site or pool name" $where $longest (len $longest)) -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- $flavors := list -}}
{{- with .Values.fleet.containerNodes -}}
  {{- $nodes := int (.nodes | default 1) -}}
  {{- $cpu := mul $nodes (int (.cpuCores | default 2)) -}}
  {{- $memory := mul $nodes (int (.memoryGi | default 8)) -}}
  {{- $flavors = append $flavors (dict "name" "system" "site" "" "pool" "system" "product" "" "gpus" 0 "cpu" $cpu "memoryGi" $memory "container" true) -}}
{{- end -}}
{{- range $type := list "cloud" "on-prem" -}}
  {{- range $site := $sites -}}
    {{- if eq $site.type $type -}}
      {{- range $pool := $site.pools -}}
        {{- $model := get $catalog $pool.gpu -}}
        {{- $nodes := int $pool.nodes -}}
        {{- $perNode := int $pool.gpusPerNode -}}
        {{- $cpu := max 1 (div (mul (int $model.cpuCores) $perNode) 8) -}}
        {{- $memory := max 1 (div (mul (int $model.memoryGi) $perNode) 8) -}}
        {{- $flavors = append $flavors (dict "name" (printf "%s-%s" $site.name $pool.name) "site" $site.name "pool" $pool.name "product" $model.product "gpus" (mul $nodes $perNode) "cpu" (mul $nodes $cpu) "memoryGi" (mul $nodes $memory)) -}}
      {{- end -}}
    {{- end -}}
  {{- end -}}
{{- end -}}
{{- toJson (dict "flavors" $flavors) -}}
{{- end -}}

{{/*
Split `total` GPUs across kueue.teams by weight, largest remainder first (Hamilton's
method): every team gets floor(total * weight / sum), and the GPUs left over go one each
to the teams with the largest remainders, ties to the team listed first. The shares add
up to `total` exactly. Call with (list $ total); returns {teamName: share}.
*/}}
{{- define "gridloop.teamShares" -}}
{{- $ctx := index . 0 -}}
{{- $total := int (index . 1) -}}
{{- $teams := $ctx.Values.kueue.teams -}}
{{- $sum := 0 -}}
{{- range $teams -}}{{- $sum = add $sum (int .weight) -}}{{- end -}}
{{- if eq (int $sum) 0 -}}
  {{- fail "kueue.teams: the weights add up to 0; give at least one team a weight above 0" -}}
{{- end -}}
{{- $quotients := list -}}
{{- $remainders := list -}}
{{- $given := 0 -}}
{{- range $teams -}}
  {{- $scaled := mul $total (int .weight) -}}
  {{- $quotients = append $quotients (div $scaled $sum) -}}
  {{- $remainders = append $remainders (mod $scaled $sum) -}}
  {{- $given = add $given (div $scaled $sum) -}}
{{- end -}}
{{- $left := sub $total $given -}}
{{- $shares := dict -}}
{{- range $i, $team := $teams -}}
  {{- $mine := index $remainders $i -}}
  {{- $rank := 0 -}}
  {{- range $j, $theirs := $remainders -}}
    {{- if or (gt $theirs $mine) (and (eq $theirs $mine) (lt $j $i)) -}}
      {{- $rank = add $rank 1 -}}
    {{- end -}}
  {{- end -}}
  {{- $_ := set $shares $team.name (add (index $quotients $i) (ternary 1 0 (lt (int $rank) (int $left)))) -}}
{{- end -}}
{{- toJson $shares -}}
{{- end -}}
