"""What readers of the agent see: /metrics, the stream (WebSocket or stdout), hello, capabilities, probe."""
