"""Grafana dashboards as code: each dashboard built in Python, written into the chart."""
