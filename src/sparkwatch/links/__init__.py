"""Links from the coordinator to agents: WebSocket (here) and SSH (tunnel or exec)."""
