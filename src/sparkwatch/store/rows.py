"""What the store hands to an export: one boot's samples column by column, named, on the agent's clocks.

Unknown values are NaN in the float columns (the core's unknown). Text columns are numpy object arrays, taken
from a block's string table in one indexing step (no Python object made per row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Text = npt.NDArray[np.object_]


@dataclass(frozen=True, slots=True)
class MemRows:
    """In seq order."""

    t_wall_ns: I64
    t_mono_ns: I64
    interval_s: F64
    used_bytes: F64
    page_cache_bytes: F64


@dataclass(frozen=True, slots=True)
class GpuRows:
    """One row per GPU per sample, in no set order."""

    t_wall_ns: I64
    t_mono_ns: I64
    interval_s: F64
    gpu_index: I64  # as the agent numbered the GPU in that sample
    uuid: Text
    power_w: F64
    energy_j: F64
    util_ratio: F64


#: A power channel as the agent streamed it: its name, kind and source.
Channel = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class SensorRows:
    """Every power channel's readings in a boot's samples: one row per (sample, channel), in seq order."""

    counts: I64  # rows per sample (a row's times are its sample's: see samples_of)
    power_w: F64  # NaN: unknown
    energy_j: F64
    channel: I64  # each row's channel, as an index into ``channels``
    #: The channels by code (None: a code no row has). A table, not a string per row: a node's three channels
    #: over an 8 h run at 10 Hz were 20 MiB of object columns.
    channels: tuple[Channel | None, ...]

    def samples_of(self, rows: I64) -> I64:
        """The sample (a position among the read's samples) of each of ``rows``."""
        return samples_of_rows(self.counts, rows)

    def text(self, part: int) -> Text:
        """Each row's channel name (0), kind (1) or source (2)."""
        table = np.empty(len(self.channels), dtype=object)
        table[:] = [None if c is None else c[part] for c in self.channels]
        values: Text = table[self.channel]
        return values


def samples_of_rows(counts: I64, rows: I64) -> I64:
    """The sample of each of ``rows`` (positions among rows of ``counts[k]`` per sample k). Not a column of
    every row's: with as many rows in every sample (the usual case) it is a division, else a search."""
    if len(counts) and int(counts.min()) == int(counts.max()) > 0:
        out: I64 = rows // int(counts[0])
        return out
    return np.searchsorted(np.cumsum(counts), rows, side="right").astype(np.int64)


@dataclass(frozen=True, slots=True)
class SignalRows:
    """Every GPU's clock signals in a boot's samples: one row per (sample, GPU), in seq order."""

    t_wall_ns: I64
    t_mono_ns: I64
    uuid: Text
    sm_clock_hz: F64  # NaN: unknown
    temperature_c: F64
    reasons: I64  # the clock event reasons bitmask; -1: unknown
