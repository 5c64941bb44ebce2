"""The coordinator's Prometheus remote write (``sparkwatch coordinator --remote-write URL``): every stored
sample, as the agent's /metrics series, and every wall-meter reading (meters.py), sent to a receiver
(Prometheus, VictoriaMetrics, Mimir, Thanos).

``spec`` is light (the CLI reads it); ``proto`` and ``sender`` load protobuf and cramjam, so they (and
``batch``, ``series`` and ``meters``, which they use) are imported only when remote write is on."""
