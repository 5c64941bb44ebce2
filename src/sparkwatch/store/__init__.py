"""SQLite storage for the coordinator: samples keyed by (node, boot_id, seq), runs, windows, clock offsets."""

from sparkwatch.store.db import Store
from sparkwatch.store.tx import (
    Damaged,
    DuplicateIds,
    Invalid,
    NotFound,
    RepeatsProxy,
    RunEnded,
    StoreError,
    Unavailable,
)

__all__ = [
    "Damaged",
    "DuplicateIds",
    "Invalid",
    "NotFound",
    "RepeatsProxy",
    "RunEnded",
    "Store",
    "StoreError",
    "Unavailable",
]
