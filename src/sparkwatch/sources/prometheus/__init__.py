"""A Prometheus-compatible engine (Prometheus, VictoriaMetrics, Thanos, Mimir) as the source of a run's
samples: the HTTP client (client.py), raw samples (raw.py), the exporter families' series (mappings.py) and
the tracks built from them (source.py). docs/fleets.md says how to point sparkwatch at one."""
