"""The coordinator process: its service (links, store, runs), the API, and what an export reads."""
