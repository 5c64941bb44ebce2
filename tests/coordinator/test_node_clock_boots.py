"""A node's clock in an export is that of the boots whose samples it placed: a boot probed only around the
span (an SSH exec session's next agent, started after the run ended) lends it no drift and no probes."""

from __future__ import annotations

import pathlib

from helpers.frames import T0, sample_frame
from sparkwatch.core.clock import ClockOffset
from sparkwatch.sources.store import node_input
from sparkwatch.store import Store

S = 1_000_000_000


def probe(store: Store, boot: str, t_s: float, mono_drift_ns: int = 0) -> None:
    """A probe round at T0 + t_s on the coordinator's clock: no wall offset, the monotonic one drifting."""
    offset = ClockOffset(0, 10**6, 5, 8, mono_offset_ns=T0 + mono_drift_ns)
    store.add_offset("n1", boot, offset, t_ns=T0 + round(t_s * S))


def test_a_boot_that_started_after_the_span_lends_the_node_no_drift_and_no_probes(
    tmp_path: pathlib.Path,
) -> None:
    store = Store(tmp_path / "c.db")
    store.ingest("n1", "b1", [sample_frame(k, {"power_w": 50.0, "util_ratio": 0.9}) for k in range(1, 601)])
    for t_s in range(0, 61, 10):
        probe(store, "b1", t_s)
    for n, t_s in enumerate(range(120, 181, 10)):  # the next session's agent, minutes later: 1000 ppm
        probe(store, "b2", t_s, mono_drift_ns=n * 10_000_000)
    clock = node_input(store, "n1", T0, T0 + 60 * S).clock.to_json()
    assert clock["rate_ppm"] == 0.0 and clock["method"] == "monotonic"
    assert clock["probes_total"] == 7  # b1's seven rounds, none of b2's
    store.close()
