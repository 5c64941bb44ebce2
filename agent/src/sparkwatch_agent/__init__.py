"""sparkwatch-agent: the per-node sampler, Prometheus target and sample stream of sparkwatch."""

__version__ = "0.1.0"
