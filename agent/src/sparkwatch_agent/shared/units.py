"""Units both distributions convert with, named once."""

from __future__ import annotations

GIB = 1024**3
