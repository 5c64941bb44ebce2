"""sparkwatch: measured power and memory for LLM benchmark runs (coordinator, analysis core, CLI)."""

__version__ = "0.1.0"
