"""Links to agents: dial (WebSocket, SSH tunnel or SSH exec), resume from the last stored seq, back off;
nodes.toml says which."""
