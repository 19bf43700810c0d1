"""`gridloop bundle`: the umbrella chart plus the upstream operators it installs.

Upstream manifests never live in git. The bundle renders them (from a Go
module's kustomize base, a release download, or a local mirror), marks what
must outlive an uninstall (CRDs, Namespaces), and writes them into a copy of
the chart: CRDs to `crds/<component>.yaml` (kept out of Helm's release record),
the rest to `upstream/<component>/`, with `images.txt` for air-gapped
registries. The pure parts (manifests, adjustments, images, sources) decide;
fetching, caching, writing and bundling act.
"""
