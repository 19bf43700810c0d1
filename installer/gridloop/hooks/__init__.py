"""What the chart's own Helm hooks run in gridloop's image (besides `helm test`'s)."""
