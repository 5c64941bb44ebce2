"""Rows of ``engine_samples`` and ``meter_samples`` edited or damaged outside sparkwatch (with the sqlite3
module): `export --db` and ``GET /v1/runs/{id}/export`` refuse them with one line that names the table, the
row and the column. They were a traceback (fields that are not JSON, a token count or a power of 'abc'), or
an export of a value nobody read (an infinite power made the window not ok, a power of 'nan' read as none).
A value the poller could have written itself (one within defaults.py's engine bounds) is no damage; one
outside them is refused by the same rule the poller's scrape follows (engines/scrape.py)."""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import sqlite3

import pytest

from helpers.cli import sparkwatch as cli
from helpers.frames import T0, sample_frame
from helpers.inproc_api import inproc_api
from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.windows import Window
from sparkwatch.store import Damaged, Store
from sparkwatch.store.engine_samples import EngineRow
from sparkwatch.store.meters import MeterReading
from sparkwatch.store.run_rows import RunRow

S = 1_000_000_000
T5 = T0 + 5 * S  # the row each damage edits: inside the run and its window
FIELDS = {
    "running_requests": 2.0,
    "kv_cache_usage_ratio": 0.5,
    "prompt_tokens": 0.0,
    "generation_tokens": 0.0,
}
SOURCES = {
    "running_requests": "vllm:num_requests_running",
    "kv_cache_usage_ratio": "vllm:kv_cache_usage_perc",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
}
ENGINE_ROW = f"engine_samples row (t_ns {T5}) is damaged in the database: "
METER_ROW = f"meter_samples row (node 'n1', domain 'wall', t_ns {T5}) is damaged in the database: "


def engine(set_: str) -> str:
    return f"UPDATE engine_samples SET {set_} WHERE t_ns = {T5}"


def meter(set_: str) -> str:
    return f"UPDATE meter_samples SET {set_} WHERE t_ns = {T5}"


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """30 s of node n1 with its wall meter polled and the engine scraped every second, as the pollers store
    them; run r1 over it with one window of 5-9 s. Made once: each test damages a copy."""
    path = tmp_path_factory.mktemp("sound") / "c.db"
    store = Store(path, now_ns=lambda: T0 + 30 * S)
    store.set_nodes(["n1"])
    store.ingest("n1", "b1", [sample_frame(i, {"power_w": 40.0, "util_ratio": 0.9}) for i in range(1, 300)])
    store.add_offset("n1", "b1", ClockOffset(0, 1000, 5, 8, mono_offset_ns=T0), t_ns=T0)
    for k in range(31):
        t_ns = T0 + k * S
        store.add_meter_reading(
            "n1", MeterReading("wall", "meter:shelly", 1.0, t_ns, 100.0, 5000.0 + k, 10**6)
        )
        counted = FIELDS | {"prompt_tokens": 10.0 * k, "generation_tokens": 20.0 * k}
        store.add_engine_sample(EngineRow(t_ns, "vllm", 1.0, counted, SOURCES, ()), 10**6)
    store.create_run(RunRow("r1", "damaged", T0, None, 0.1, 0.5, "request"))
    store.add_windows("r1", [Window("w1", "timed", T0 + 5 * S, T0 + 9 * S)])
    store.end_run("r1", T0 + 29 * S)
    store.close()
    return path


def damaged(sound: pathlib.Path, tmp_path: pathlib.Path, damage: str) -> pathlib.Path:
    path = tmp_path / "c.db"
    shutil.copy(sound, path)
    db = sqlite3.connect(path)
    assert db.execute(damage).rowcount >= 1
    db.commit()
    db.close()
    return path


def test_the_sound_file_exports_its_engine_and_meter(sound: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out.json"
    assert cli("export", "--db", str(sound), "r1", "-o", str(out)).returncode == 0
    export = json.loads(out.read_text())
    assert export["engine"]["running_requests"] == {"mean": 2.0, "max": 2.0}
    assert export["engine"]["generation_tokens_per_s"] == 20.0
    (wall,) = [d for d in export["nodes"][0]["system"]["domains"] if d["domain"] == "wall"]
    assert wall["source"] == "meter:shelly"


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (engine("fields = 'not json'"), "fields 'not json' is not a JSON object"),
        (engine("sources = 'not json'"), "sources 'not json' is not a JSON object"),
        (engine("unknown = 'not json'"), "unknown 'not json' is not a JSON array of series names or null"),
        (
            engine("""fields = '{"prompt_tokens": "abc"}'"""),
            "fields['prompt_tokens'] 'abc' is not a finite number",
        ),
        (engine("interval_s = 'abc'"), "interval_s 'abc' is not in [0.2, 60.0] seconds"),
        (
            engine("""fields = replace(fields, '"running_requests": 2.0', '"running_requests": 1e999')"""),
            "fields['running_requests'] inf is not a finite number",
        ),
        (meter("power_w = 'abc'"), "power_w 'abc' is not a finite number or null"),
        (meter("interval_s = 'abc'"), "interval_s 'abc' is not a finite number"),
        (meter("energy_j = 'abc'"), "energy_j 'abc' is not a finite number or null"),
        (meter("uncertainty_ns = 'abc'"), "uncertainty_ns 'abc' is not an integer"),
        (meter("power_w = 1e999"), "power_w inf is not a finite number or null"),
    ],
)
def test_a_damaged_engine_or_meter_row_is_one_line_and_writes_nothing(
    sound: pathlib.Path, tmp_path: pathlib.Path, damage: str, said: str
) -> None:
    """Each was a traceback (a JSONDecodeError, a TypeError in the engine's figures, a ValueError reading a
    meter's column), or for an infinite power an export with exit 0 whose window was not ok."""
    path = damaged(sound, tmp_path, damage)
    out = tmp_path / "out.json"
    done = cli("export", "--db", str(path), "r1", "-o", str(out))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    *_progress, last = done.stderr.splitlines()  # after the line that says which run it exports
    row = ENGINE_ROW if damage.startswith("UPDATE engine") else METER_ROW
    assert last.startswith(f"sparkwatch: error: {row}{said}"), done.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (
            engine("fields = json_set(fields, '$.prompt_tokens', 'NaN')"),
            "fields['prompt_tokens'] 'NaN' is not",
        ),
        (
            engine("""fields = '{"prompt_tokens": NaN}'"""),
            "fields['prompt_tokens'] nan is not a finite number",
        ),
        (
            engine("""fields = '{"prompt_tokens": true}'"""),
            "fields['prompt_tokens'] True is not a finite number",
        ),
        (engine(f"""fields = '{{"prompt_tokens": 1{"0" * 400}}}'"""), "fields['prompt_tokens'] 10000"),
        (engine("fields = '[1, 2]'"), "fields '[1, 2]' is not a JSON object"),
        (engine("""sources = '{"prompt_tokens": 5}'"""), "sources['prompt_tokens'] 5 is not a series name"),
        (engine("unknown = '[1]'"), "unknown '[1]' is not a JSON array of series names or null"),
        (engine("family = 'trtllm'"), "family 'trtllm' is not one of vllm, sglang or null"),
        (engine("interval_s = 0.01"), "interval_s 0.01 is not in [0.2, 60.0] seconds"),
        (meter("power_w = 'nan'"), "power_w 'nan' is not a finite number or null"),
        (meter("energy_j = -1e999"), "energy_j -inf is not a finite number or null"),
        (meter("interval_s = x'00'"), "interval_s b'\\x00' is not a finite number"),
        (meter("uncertainty_ns = 1.5"), "uncertainty_ns 1.5 is not an integer"),
        (meter("source = x'00'"), "source b'\\x00' is not text"),
    ],
)
def test_every_value_the_pollers_never_write_is_refused_by_the_reads(
    sound: pathlib.Path, tmp_path: pathlib.Path, damage: str, said: str
) -> None:
    """The reads the export makes, without a process each: a NaN the engine's page never gives (its
    parser keeps finite samples), a count of true, a token count too large for a float, a scrape interval
    its spec refuses, a meter column SQLite holds as text or a blob."""
    store = Store(damaged(sound, tmp_path, damage))
    try:
        with pytest.raises(Damaged) as refused:
            store.engine_rows(T0, T0 + 30 * S)
            store.meter_rows("n1", T0, T0 + 30 * S, 5 * S)
        row = ENGINE_ROW if damage.startswith("UPDATE engine") else METER_ROW
        assert str(refused.value).startswith(row + said), refused.value
    finally:
        store.close()


def test_values_a_poller_before_the_bounds_stored_are_left_out_as_the_scrape_leaves_them_out(
    sound: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A poller before the bounds (defaults.engine_value_max) stored any finite value: such a row is no
    damage, so its run still exports, but its value is no count either (a 1e308 spoiled the sums over other
    windows): read as today's scrape would have stored it, without that value, the row's others kept."""
    path = damaged(sound, tmp_path, engine("fields = json_set(fields, '$.running_requests', -50)"))
    db = sqlite3.connect(path)
    with db:
        db.execute(
            engine("fields = json_set(fields, '$.kv_cache_usage_ratio', 7.0, '$.prompt_tokens', 1e308)")
        )
    db.close()
    store = Store(path)
    try:
        (row,) = [r for r in store.engine_rows(T0, T0 + 30 * S) if r.t_ns == T5]
        assert list(row.fields) == ["generation_tokens"] and row.fields["generation_tokens"] >= 0
        assert row.sources == {"generation_tokens": "vllm:generation_tokens_total"}
        (other,) = [r for r in store.engine_rows(T0, T0 + 30 * S) if r.t_ns == T5 + S]
        assert set(other.fields) == set(FIELDS) and other.sources == SOURCES
    finally:
        store.close()
    out = tmp_path / "out.json"
    done = cli("export", "--db", str(path), "r1", "-o", str(out))
    assert done.returncode == 0, done.stderr


def test_values_the_poller_could_have_written_are_read_as_they_are(
    sound: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """The engine poller stores any value within the bounds (0 and 2**53 for a count, 1 for a ratio,
    exactly), and an integer is a number too: no damage. A meter's negative power is the export's to judge
    (an implausible interval), as the meter poller's check keeps such readings out."""
    path = damaged(sound, tmp_path, engine("fields = json_set(fields, '$.running_requests', 0)"))
    db = sqlite3.connect(path)
    with db:
        db.execute(
            engine(f"fields = json_set(fields, '$.kv_cache_usage_ratio', 1.0, '$.prompt_tokens', {2**53})")
        )
        db.execute(meter("power_w = -5, energy_j = NULL"))
    db.close()
    store = Store(path)
    try:
        (row,) = [r for r in store.engine_rows(T0, T0 + 30 * S) if r.t_ns == T5]
        read = {f: row.fields[f] for f in ("running_requests", "kv_cache_usage_ratio", "prompt_tokens")}
        assert read == {"running_requests": 0, "kv_cache_usage_ratio": 1.0, "prompt_tokens": 2**53}
        readings = store.meter_rows("n1", T0, T0 + 30 * S)
        assert readings.power_w[5] == -5.0 and math.isnan(readings.energy_j[5])  # NULL: none read
    finally:
        store.close()


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (engine("fields = 'not json'"), ENGINE_ROW + "fields 'not json' is not a JSON object"),
        (meter("power_w = 'abc'"), METER_ROW + "power_w 'abc' is not a finite number or null"),
    ],
)
async def test_the_api_refuses_the_export_with_409_and_the_line(
    sound: pathlib.Path, tmp_path: pathlib.Path, damage: str, said: str
) -> None:
    """The coordinator's export answers the refusal (it was a 500 with the traceback in its log)."""
    path = damaged(sound, tmp_path, damage)
    async with inproc_api(path, T0 + 60 * S, ["n1"]) as (client, _, _):
        response = await client.get("/v1/runs/r1/export")
        assert response.status == 409
        assert (await response.json()) == {"error": "damaged", "reason": said}


def test_the_stores_engine_families_are_the_scraped_ones() -> None:
    """The store checks a row's family by the names in defaults.py (it may not import the engines)."""
    from sparkwatch.defaults import ENGINE_FAMILY_NAMES
    from sparkwatch.engines.families import FAMILIES

    assert tuple(f.name for f in FAMILIES) == ENGINE_FAMILY_NAMES
