"""The serving engine's own Prometheus ``/metrics`` (vLLM, SGLang), scraped by the coordinator itself."""
