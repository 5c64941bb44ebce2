"""A coordinator (never dialling) that holds 12 s of one node's samples, behind its API on a test server:
what the export's API tests read runs from."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from helpers.frames import sample_frame
from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.core.clock import ClockOffset
from sparkwatch.links.nodes_file import NodeSpec
from sparkwatch.store import Store
from sparkwatch.wire import SampleFrame

S = 1_000_000_000
T0 = 1_800_000_000 * S


def sample(seq: int) -> SampleFrame:
    """Node n1 every 0.1 s after T0: 10 W by its counter, busy, its SM clock at 2.4 GHz; a power brake from
    4 s to 5 s."""
    brake = 40 <= seq < 50
    gpu = {
        "power_w": 10.0,
        "energy_j": float(seq),
        "util_ratio": 0.9,
        "sm_clock_hz": 2_400_000_000,
        "clock_event_reasons": 0x80 if brake else 0,
    }
    return sample_frame(seq, gpu, used_bytes=1000 + seq)


@dataclass
class Api:
    client: TestClient[Any, Any]
    store: Store
    clock: list[int]

    async def get(self, path: str) -> tuple[int, Any]:
        response = await self.client.get(path)
        return response.status, await response.json()


def with_node(path: pathlib.Path, clock: list[int]) -> tuple[Store, Coordinator]:
    """A coordinator that knows node n1 (never dialled) and holds 12 s of its samples."""
    store = Store(path, now_ns=lambda: clock[0])
    coordinator = Coordinator([NodeSpec("n1", url="ws://unused")], store, now_ns=lambda: clock[0])
    hardware = {"gpus": [{"uuid": "GPU-x", "max_sm_clock_hz": 3_000_000_000}]}
    store.record_hello("n1", {"boot_id": "b1", "hardware": hardware, "capabilities": {"gpus": []}})
    store.ingest("n1", "b1", [sample(i) for i in range(1, 121)])
    for t in (T0, T0 + 12 * S):
        store.add_offset("n1", "b1", ClockOffset(0, 1000, 5, 8, mono_offset_ns=T0), t_ns=t)
    return store, coordinator


@contextlib.asynccontextmanager
async def node_api(path: pathlib.Path) -> AsyncIterator[Api]:
    """:func:`with_node`'s coordinator behind its API on a test server (no token), its clock at T0; all of
    it stopped and closed at the block's end."""
    clock = [T0]
    store, coordinator = with_node(path, clock)
    client = TestClient(TestServer(make_app(coordinator, None)))
    await client.start_server()
    try:
        yield Api(client, store, clock)
    finally:
        await client.close()
        await coordinator.stop()
        store.close()


async def ended_run(api: Api) -> str:
    """A run over [T0, T0 + 10 s] with one timed window of 2-7 s."""
    response = await api.client.post("/v1/runs", json={"name": "series"})
    run_id = str((await response.json())["id"])
    window = {"id": "w1", "phase": "timed", "t_start_ns": T0 + 2 * S, "t_end_ns": T0 + 7 * S}
    assert (await api.client.post(f"/v1/runs/{run_id}/windows", json={"windows": [window]})).status == 201
    api.clock[0] = T0 + 10 * S
    assert (await api.client.post(f"/v1/runs/{run_id}/end")).status == 200
    return run_id
