"""`gridloop render` and `gridloop install`: the umbrella chart, rendered and installed.

Both commands render first, with the project-built helm, so bad values fail with one
line before anything reaches a cluster. `install` then applies the chart's `crds/`
server-side (Helm installs CRDs once and never upgrades them) and runs
`helm upgrade --install --skip-crds`.

The pure parts decide: `values` (merging values as Helm does, enough to check the
fleet with gridloop's own schema), `messages` (Helm's errors as one line),
`records` (how big Helm's release Secret would be). `locating` finds the chart, the
profile and the kubeconfig; `rendering` and `installing` run helm and kubectl;
`commands` parses flags and prints. Nothing here may touch a cluster before the
values have rendered.
"""
