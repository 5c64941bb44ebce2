"""Ways benchmark requests become windows: the OpenAI-compatible proxy, `sparkwatch run`, the demo."""
