"""Agent sample frames for tests that feed a store directly: the agent's stream JSON for node ``n1``, decoded
by the coordinator's one decoder (``wire.decode_frame``), so a test's sample is what a link would store."""

from __future__ import annotations

import json
from typing import Any

from sparkwatch.wire import SampleFrame, decode_frame

S = 1_000_000_000
T0 = 1_800_000_000 * S


def frame_of(
    seq: int,
    gpus: list[dict[str, Any]],
    *,
    used_bytes: int | None = 1000,
    page_cache_bytes: int | None = None,
    boot: str = "b1",
    interval_s: float = 0.1,
    sensors: list[dict[str, Any]] | None = None,
) -> SampleFrame:
    """Sample ``seq`` of node n1 with these GPUs and power channels, taken ``seq`` intervals after T0 (wall)
    and 0 (monotonic), decoded as a link would store it."""
    step_ns = round(interval_s * S)
    data = {
        "type": "sample",
        "seq": seq,
        "boot_id": boot,
        "node": "n1",
        "t_wall_ns": T0 + seq * step_ns,
        "t_mono_ns": seq * step_ns,
        "interval_s": interval_s,
        "gpu_error": None,
        "gpus": gpus,
        "memory": {"used_bytes": used_bytes, "page_cache_bytes": page_cache_bytes},
        "sensors": sensors or [],
    }
    frame = decode_frame(json.dumps(data), data)
    assert isinstance(frame, SampleFrame)
    return frame


def sample_frame(
    seq: int,
    gpu: dict[str, Any],
    *,
    used_bytes: int = 1000,
    boot: str = "b1",
    interval_s: float = 0.1,
) -> SampleFrame:
    """Sample ``seq`` of node n1 (see :func:`frame_of`) with one GPU (index 0, uuid GPU-x, and the fields of
    ``gpu``) and no power channels."""
    gpus = [{"index": 0, "uuid": "GPU-x", **gpu}]
    return frame_of(seq, gpus, used_bytes=used_bytes, boot=boot, interval_s=interval_s)
