"""Building what the local cluster runs: the Go recipes and their build (`recipes`,
`building`, `gomod`), the build-time edits of upstream source (`overlays`,
`netpol_overlays`), and the container images (`images/`)."""
