"""The umbrella chart, rendered and installed: `gridloop render|doctor|install|upgrade|
uninstall|completion`.

Every command renders first, with the project-built helm, so bad values fail with one
line before anything reaches a cluster. `doctor` then reads the cluster; `install`
runs doctor, then its phases (the chart's `crds/` server-side, the components with
Helm's ownership marks, `helm upgrade --install --skip-crds`) and waits for readiness.

The pure parts decide: `values` (merging values as Helm does), `messages` (Helm's
errors as one line), `records` (how big Helm's release Secret would be), `objects`
(the rendering split into phases), `diagnosis`/`checks`/`clashes`/`planning`
(doctor's verdicts), `readiness`, `purging`. The shells act: `locating` finds the
chart, profile and kubeconfig; `connecting` builds the one client; `rendering`,
`installing` run helm and kubectl; `doctoring`, `waiting`, `releases` read and write
the cluster; `bundles` unpacks `--bundle`; the `*_command` modules and `commands`
parse flags and print; `exits` holds the exit codes. Nothing here may touch a
cluster before the values have rendered.
"""
