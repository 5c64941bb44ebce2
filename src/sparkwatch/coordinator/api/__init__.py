"""The coordinator's HTTP API (aiohttp + pydantic)."""
