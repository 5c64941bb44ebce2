"""SQLite storage for the coordinator: samples keyed by (node, boot_id, seq), runs, windows, clock offsets."""

from sparkwatch.store.db import Store
from sparkwatch.store.tx import Invalid, NotFound, StoreError, Unavailable

__all__ = ["Invalid", "NotFound", "Store", "StoreError", "Unavailable"]
