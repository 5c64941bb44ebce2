"""A wall meter's failed poll is a gap in the export, whatever the readings each side of it: a line between
them would be a reading nobody took (a BMC that answered 404 for one poll between 374 W and 600 W put
≈ 975 J of an invented ramp into the window's energy, which the export called ok)."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from helpers.frames import T0, sample_frame
from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.export_schema import run_schema
from sparkwatch.core.window_rows import plain
from sparkwatch.core.windows import Window
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store
from sparkwatch.store.meters import MeterReading
from sparkwatch.store.run_rows import RunRow

S = 1_000_000_000
POLL_S = 1.0


def exported(tmp_path: pathlib.Path, failed_at_s: list[float], refresh_s: float = 0.0) -> dict[str, object]:
    """10 s of a busy node at 10 Hz and its meter polled every second (300 W, then 600 W from 5 s), each
    poll at ``failed_at_s`` an error instead of a reading; one window over 1–9 s. ``refresh_s``: the BMC's
    refresh period, in each reading's uncertainty as the poller stores it."""
    store = Store(tmp_path / "c.db")
    store.set_nodes(["n1"])
    store.ingest("n1", "b1", [sample_frame(k, {"power_w": 50.0, "util_ratio": 0.9}) for k in range(1, 101)])
    for t_s in range(0, 11, 5):
        store.add_offset("n1", "b1", ClockOffset(0, 10**6, 5, 8, mono_offset_ns=T0), t_ns=T0 + t_s * S)
    for k in range(10):
        t_s = k + 0.5
        t_ns = T0 + round(t_s * S)
        if t_s in failed_at_s:
            store.add_meter_error(
                "n1", "wall", t_ns, "redfish answered HTTP 404 for /redfish/v1/Chassis/1U", "meter:redfish"
            )
        else:
            watts = 300.0 if t_s < 5 else 600.0
            age_ns = 2_000_000 + round(refresh_s * S)  # half a 4 ms round trip, and the refresh
            store.add_meter_reading(
                "n1", MeterReading("wall", "meter:redfish", POLL_S, t_ns, watts, None, age_ns)
            )
    store.create_run(RunRow("r", "meter", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r", [Window("w", "timed", T0 + S, T0 + 9 * S)])
    store.end_run("r", T0 + 10 * S)
    try:
        return export_run(store, "r", ["n1"], time.time_ns)
    finally:
        store.close()


def wall(export: dict[str, object]) -> tuple[dict[str, object], dict[str, object]]:
    """The wall domain of the node's figures and of the window's."""
    node = export["nodes"][0]  # type: ignore[index]
    (domain,) = [d for d in node["system"]["domains"] if d["domain"] == "wall"]
    window = export["windows"][0]  # type: ignore[index]
    (in_window,) = [d for d in window["nodes"][0]["system"] if d["domain"] == "wall"]
    return domain, in_window


def test_every_poll_answered_is_measured_whole(tmp_path: pathlib.Path) -> None:
    export = exported(tmp_path, [])
    assert export["windows"][0]["verdict"] == "ok"  # type: ignore[index]
    domain, in_window = wall(export)
    assert domain["samples"]["coverage_ratio"] == 1.0 and domain["samples"]["max_gap_s"] == 0.0
    assert in_window["coverage_ratio"] == 1.0
    # 1–4.5 s at 300 W, the ramp 4.5–5.5 s (a reading each side of it), 5.5–9 s at 600 W
    assert in_window["energy_j"] == pytest.approx(3.5 * 300 + 450 + 3.5 * 600, rel=1e-3)


@pytest.mark.parametrize(
    ("failed_at_s", "covered_j"),
    [
        ([5.5], 3.5 * 300 + 2.5 * 600),  # 1–4.5 s, then 6.5–9 s: nothing between 4.5 and 6.5
        ([4.5], 2.5 * 300 + 3.5 * 600),
        ([4.5, 5.5], 2.5 * 300 + 2.5 * 600),
    ],
)
def test_a_failed_poll_leaves_a_gap_with_its_error(
    tmp_path: pathlib.Path, failed_at_s: list[float], covered_j: float
) -> None:
    export = exported(tmp_path, failed_at_s)
    domain, in_window = wall(export)
    gap_s = 1.0 + len(failed_at_s)
    assert domain["samples"]["max_gap_s"] == pytest.approx(gap_s, abs=1e-6)
    assert domain["samples"]["coverage_ratio"] < 1.0
    assert in_window["coverage_ratio"] == pytest.approx((8 - gap_s) / 8, abs=1e-3)
    assert in_window["energy_j"] == pytest.approx(covered_j, rel=1e-3)  # the covered time's, no ramp
    (reason,) = domain["errors"]  # each failed poll said the same: one reason, from its first time
    assert reason["error"].startswith("redfish answered HTTP 404") and reason["count"] == len(failed_at_s)
    assert (reason["t_ns"], reason["last_t_ns"]) == (
        T0 + round(failed_at_s[0] * S),
        T0 + round(failed_at_s[-1] * S),
    )
    window = export["windows"][0]  # type: ignore[index]
    assert window["verdict"] == "low_confidence" and window["reasons"] == [
        f"n1 wall: coverage {in_window['coverage_ratio']:.3f} < 0.95"
    ]
    assert export["totals"]["system_energy_j"] is None  # type: ignore[index]


def test_a_meter_that_never_answered_is_named_by_its_kind(tmp_path: pathlib.Path) -> None:
    """Every poll failed: no reading says what the meter is, its failed polls do ("meter" before)."""
    domain, in_window = wall(exported(tmp_path, [k + 0.5 for k in range(10)]))
    assert domain["source"] == "meter:redfish" and in_window["energy_j"] is None
    assert domain["samples"]["coverage_ratio"] == 0.0 and [e["count"] for e in domain["errors"]] == [10]


def failing(tmp_path: pathlib.Path, failure: Callable[[int], str | None]) -> dict[str, Any]:
    """The wall domain of a 50 s run whose meter's poll ``k`` (one a second) failed with ``failure(k)``, or
    read 300 W where that is None; checked against the export's schema."""
    store = Store(tmp_path / "c.db")
    store.set_nodes(["n1"])
    store.ingest("n1", "b1", [sample_frame(k, {"power_w": 50.0, "util_ratio": 0.9}) for k in range(1, 501)])
    store.add_offset("n1", "b1", ClockOffset(0, 10**6, 5, 8, mono_offset_ns=T0), t_ns=T0)
    for k in range(50):
        t_ns = T0 + k * S
        if (error := failure(k)) is not None:
            store.add_meter_error("n1", "wall", t_ns, error, "meter:shelly")
        else:
            store.add_meter_reading("n1", MeterReading("wall", "meter:shelly", POLL_S, t_ns, 300.0, None, 0))
    store.create_run(RunRow("r", "meter", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r", [Window("w", "timed", T0 + S, T0 + 49 * S)])
    store.end_run("r", T0 + 50 * S)
    try:
        export = export_run(store, "r", ["n1"], time.time_ns)
    finally:
        store.close()
    jsonschema.validate(plain(export), run_schema())
    domain, in_window = wall(export)
    return {**domain, "window_energy_j": in_window["energy_j"]}


def test_every_failed_poll_breaks_the_readings_and_is_counted(tmp_path: pathlib.Path) -> None:
    """A meter failing every other poll for 50 polls (25 failures) covers none of its time; its one reason
    says how many polls said it, from when until when."""
    domain = failing(tmp_path, lambda k: "shelly answered HTTP 503" if k % 2 else None)
    assert domain["errors"] == [
        {"t_ns": T0 + S, "last_t_ns": T0 + 49 * S, "count": 25, "error": "shelly answered HTTP 503"}
    ]
    assert domain["samples"]["coverage_ratio"] == 0.0 and domain["window_energy_j"] is None


def test_a_later_outages_reason_is_listed_after_an_early_one(tmp_path: pathlib.Path) -> None:
    """The export listed the first 20 failed polls: a 20-poll outage at the start hid why the meter failed
    later (a sweep: the later gaps had no reason anywhere, and nothing said more had failed)."""
    domain = failing(
        tmp_path,
        lambda k: (
            "no answer within the timeout" if k < 20 else "shelly answered HTTP 503" if k > 40 else None
        ),
    )
    assert [(e["error"], e["count"], e["t_ns"]) for e in domain["errors"]] == [
        ("no answer within the timeout", 20, T0),
        ("shelly answered HTTP 503", 9, T0 + 41 * S),
    ]
    assert "errors_omitted" not in domain


def test_reasons_past_the_listed_ones_are_counted(tmp_path: pathlib.Path) -> None:
    """A reason with a number in it (a value refused) may make a new reason each poll: 20 are listed, the
    failed polls of the rest counted."""
    domain = failing(tmp_path, lambda k: f"shelly apower is negative (-{k} W)" if k < 30 else None)
    assert [e["error"] for e in domain["errors"]] == [
        f"shelly apower is negative (-{k} W)" for k in range(20)
    ]
    assert domain["errors_omitted"] == 10


def test_a_window_shorter_than_two_of_the_bmcs_refreshes_is_low_confidence(tmp_path: pathlib.Path) -> None:
    """A BMC that refreshes its reading every 30 s answers each poll with a value up to 30 s old: over an
    8 s window its figure is one stale value, however often it is polled."""
    export = exported(tmp_path, [], refresh_s=30.0)
    window = export["windows"][0]  # type: ignore[index]
    assert window["verdict"] == "low_confidence"
    assert window["reasons"] == [
        "n1 wall: shorter (8.000 s) than 2 reading intervals (60.004 s: a reading every 30.002 s)"
    ]
    _, in_window = wall(export)
    assert in_window["coverage_ratio"] == 1.0  # measured all the same: the verdict says how far to trust it


def _whole_run(tmp_path: pathlib.Path, polls_s: list[float], failed_at_s: tuple[float, ...] = ()) -> Store:
    """12 s of a busy node at 10 Hz, its meter read at 300 W at ``polls_s`` (a failed poll at
    ``failed_at_s``), and a run measured whole from 1 s to 9.95 s: between two polls, 9.5 s and 10.5 s."""
    store = Store(tmp_path / "c.db")
    store.set_nodes(["n1"])
    store.ingest("n1", "b1", [sample_frame(k, {"power_w": 50.0, "util_ratio": 0.9}) for k in range(1, 121)])
    store.add_offset("n1", "b1", ClockOffset(0, 10**6, 5, 8, mono_offset_ns=T0), t_ns=T0)
    for t_s in polls_s:
        reading = MeterReading("wall", "meter:redfish", POLL_S, T0 + round(t_s * S), 300.0, None, 2_000_000)
        store.add_meter_reading("n1", reading)
    for t_s in failed_at_s:
        store.add_meter_error(
            "n1", "wall", T0 + round(t_s * S), "no answer within the timeout", "meter:redfish"
        )
    store.create_run(RunRow("r", "whole", T0 + S, None, 0.1, 0.0, "run"))
    store.end_run("r", T0 + 9_950_000_000)
    return store


def _wall_of(store: Store) -> dict[str, object]:
    export = export_run(store, "r", ["n1"], lambda: T0 + 60 * S)
    (domain,) = [d for d in export["nodes"][0]["system"]["domains"] if d["domain"] == "wall"]
    return domain


def test_the_meters_reading_after_the_end_closes_the_runs_last_interval(tmp_path: pathlib.Path) -> None:
    """Meters were read up to the run's end: the stretch from the last poll before it to the end was never
    covered (up to a poll interval of every run, 0.45 s of this one), though the next poll was stored."""
    store = _whole_run(tmp_path, [k + 0.5 for k in range(11)])  # 0.5 s .. 10.5 s
    domain = _wall_of(store)
    assert domain["samples"]["coverage_ratio"] == 1.0 and domain["samples"]["max_gap_s"] == 0.0
    assert domain["energy_j"] == pytest.approx(300.0 * 8.95)
    # only that one reading is read past the end: the polls stored later change nothing
    for t_s in (11.5, 12.5):
        store.add_meter_reading(
            "n1", MeterReading("wall", "meter:redfish", POLL_S, T0 + round(t_s * S), 900.0, None, 0)
        )
    store.add_meter_error("n1", "wall", T0 + 13 * S, "no answer within the timeout", "meter:redfish")
    assert _wall_of(store) == domain
    store.close()


def test_a_failed_poll_after_the_end_leaves_the_last_interval_open(tmp_path: pathlib.Path) -> None:
    """The first reading after the end closes the last interval only as readings close any: a failed poll
    between them is a gap, not a line drawn across it."""
    store = _whole_run(tmp_path, [k + 0.5 for k in range(10)] + [10.8], failed_at_s=(10.3, 11.3))
    domain = _wall_of(store)
    assert domain["samples"]["coverage_ratio"] == pytest.approx(8.5 / 8.95, abs=1e-4)  # 1 s .. 9.5 s
    # the failure that leaves it open says why, as one inside the span does; one after the closing
    # reading is not the run's
    assert [e["t_ns"] for e in domain["errors"]] == [T0 + 10_300_000_000]
    assert domain["energy_j"] == pytest.approx(300.0 * 8.5)  # the covered part's, nothing across the gap
    store.close()
