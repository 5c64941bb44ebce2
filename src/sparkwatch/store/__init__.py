"""SQLite storage for the coordinator: samples keyed by (node, boot_id, seq), runs, windows, clock offsets."""

from sparkwatch.store.db import Store
from sparkwatch.store.tx import (
    Corrupt,
    Damaged,
    DuplicateIds,
    Invalid,
    NotFound,
    RepeatsProxy,
    RunEnded,
    StoreError,
    Unavailable,
    corrupt_or_none,
    unavailable_now,
)

__all__ = [
    "Corrupt",
    "Damaged",
    "DuplicateIds",
    "Invalid",
    "NotFound",
    "RepeatsProxy",
    "RunEnded",
    "Store",
    "StoreError",
    "Unavailable",
    "corrupt_or_none",
    "unavailable_now",
]
