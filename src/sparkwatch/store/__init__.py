"""SQLite storage for the coordinator: samples keyed by (node, boot_id, seq), runs, windows, clock offsets."""

from sparkwatch.store.db import NotFound, Store, StoreError

__all__ = ["NotFound", "Store", "StoreError"]
