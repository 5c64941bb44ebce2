"""The export's windows spooled as the digest's pass makes them (window_spool): the file written from the
spool is the file written without it, byte for byte, whatever the count; a spool that missed a slice, or
met what the writer hands to json, is not used; and `sparkwatch export` makes the windows once, not three
times (digest, file, quality line)."""

from __future__ import annotations

import io
import json
import pathlib
import time
from typing import Any

import pytest
from test_core_export import RUN, node
from test_window_rows import many_windows, squares

from helpers.frames import T0, sample_frame
from helpers.windows_made import count_windows_made
from sparkwatch.cli import main
from sparkwatch.commands.outcome import quality_line
from sparkwatch.commands.quality import JUDGED_FIELDS, judge
from sparkwatch.core.clock import ClockOffset
from sparkwatch.core.export import build_export
from sparkwatch.core.json_pieces import json_pieces
from sparkwatch.core.windows import Window
from sparkwatch.outputs import LIST_ITEMS_AT_ONCE, print_export, write_export, write_export_to
from sparkwatch.sources.store import export_run
from sparkwatch.store import Store
from sparkwatch.store.run_rows import RunRow
from sparkwatch.window_spool import WindowSpool, wire_pieces

S = 1_000_000_000


def written(export: dict[str, Any], spool: WindowSpool | None = None) -> bytes:
    out = io.BytesIO()
    write_export_to(out, export, spool)
    return out.getvalue()


def counted(spool: WindowSpool) -> tuple[list[int], Any]:
    """A tap that hands every slice to ``spool`` and counts the windows made."""
    made: list[int] = []

    def tap(lo: int, windows: list[Any]) -> None:
        made.append(len(windows))
        spool(lo, windows)

    return made, tap


@pytest.mark.parametrize("count", [0, 1, 2, LIST_ITEMS_AT_ONCE, LIST_ITEMS_AT_ONCE + 1, 1001])
def test_the_file_from_the_spool_is_the_file_the_windows_make(count: int) -> None:
    with WindowSpool(keep=JUDGED_FIELDS) as spool:
        made, tap = counted(spool)
        export = build_export(
            RUN, [node("spark-1", 10.0, 60.0, [(20, 30)], 8.0)], many_windows(count), "0.1.0", windows_tap=tap
        )
        assert sum(made) == count  # the digest's pass, inside the export
        text = written(export, spool)
        assert sum(made) == count  # the file took the spool's bytes: no window made again
        assert spool.holds(count) is (count > 0)
        assert text == written(export)  # the windows made again, without the spool: the same bytes
        assert sum(made) == 2 * count  # (that pass was handed to the tap, which kept nothing of it)
        windows = json.loads(text)["windows"]
        assert spool.kept(count) == [{k: w[k] for k in JUDGED_FIELDS} for w in windows]
        assert spool.kept(count + 1) is None and (count == 0 or not spool.holds(count - 1))


def test_a_spool_that_missed_a_slice_is_not_used() -> None:
    rows, made = squares(3 * LIST_ITEMS_AT_ONCE)
    with WindowSpool(keep=["k"]) as spool:
        spool(0, rows[0:10])
        spool(20, rows[20:30])  # a hole: [10, 20) never seen
        spool(10, rows[10:20])
        assert not spool.holds(3 * LIST_ITEMS_AT_ONCE) and spool.kept(30) is None
        made.clear()
        assert written({"windows": rows}, spool) == written({"windows": rows})
        assert made  # the writer made them itself


def test_later_passes_are_not_spooled_and_text_is_optional() -> None:
    rows, _ = squares(7)
    with WindowSpool(keep=["square"], text=False) as spool:
        spool(0, rows[0:7])
        spool(0, [{"k": 0, "square": -1}])  # a later pass (a reader of one window) changes nothing
        assert spool.kept(7) == [{"square": k * k} for k in range(7)]
        assert not spool.holds(7) and list(spool.pieces()) == []  # no text spooled: the writer makes it
        assert written({"windows": rows}, spool) == written({"windows": rows})


def test_a_non_ascii_window_leaves_the_writing_to_json_as_before() -> None:
    windows = [*many_windows(3), Window("réponse", "timed", T0 + 21 * S, T0 + 22 * S)]
    with WindowSpool(keep=["id"]) as spool:
        export = build_export(
            RUN, [node("spark-1", 10.0, 60.0, [(20, 30)], 8.0)], windows, "0.1.0", windows_tap=spool
        )
        assert not spool.holds(4)
        text = written(export, spool)
        assert text == written(export) and "\\u00e9" in text.decode()  # json's escapes, whole
        kept = spool.kept(4)
        assert kept == [{"id": w.id} for w in windows]  # the fields kept still hold
    assert not spool.holds(4) and spool.kept(4) is None  # closed: it holds nothing


def test_a_value_orjson_refuses_leaves_the_writer_to_refuse_it() -> None:
    with WindowSpool() as spool:
        spool(0, [{"k": 1 << 70}])  # past 64 bits: orjson raises TypeError, as the writer's pass would
        assert not spool.holds(1)


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """60 s of node n1 at 10 Hz; run r1 over it with 1 200 windows of 0.5 s, one every 40 ms."""
    path = tmp_path_factory.mktemp("spool") / "c.db"
    store = Store(path, now_ns=lambda: T0 + 60 * S)
    store.set_nodes(["n1"])
    store.ingest("n1", "b1", [sample_frame(i, {"power_w": 40.0, "util_ratio": 0.9}) for i in range(1, 600)])
    store.add_offset("n1", "b1", ClockOffset(0, 1000, 5, 8, mono_offset_ns=T0), t_ns=T0)
    store.create_run(RunRow("r1", "spooled", T0, None, 0.1, 0.5, "request"))
    starts = [T0 + 5 * S + k * S // 25 for k in range(1200)]
    store.add_windows("r1", [Window(f"w{k}", "timed", t, t + S // 2) for k, t in enumerate(starts)])
    store.end_run("r1", T0 + 58 * S)
    store.close()
    return path


@pytest.mark.parametrize("to_file", [True, False])
def test_export_makes_the_windows_once(
    database: pathlib.Path,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
    to_file: bool,
) -> None:
    """`sparkwatch export --db F r1 [-o OUT]`: every window the export makes is handed to the command's
    spool (the tap sees every pass), so the count is the windows made; the file and stdout are what the
    export written without a spool is."""
    made = count_windows_made(monkeypatch)
    out = tmp_path / "out.json"
    assert main(["export", "--db", str(database), "r1", *(["-o", str(out)] if to_file else [])]) == 0
    captured = capsysbinary.readouterr()
    assert sum(made) == 1200
    store = Store.read_only(database)
    expected = export_run(store, "r1", store.node_names(), time.time_ns)
    store.close()
    line = quality_line(judge(expected))  # judged from the windows made again: as from the kept fields
    assert "1200 of 1200 timed windows ok" in line and line.encode() in captured.err
    if to_file:
        reference = tmp_path / "reference.json"
        write_export(reference, expected)
        assert out.read_bytes() == reference.read_bytes()
    else:
        text = io.StringIO()
        print_export(expected, text)
        assert captured.out == text.getvalue().encode()


@pytest.mark.parametrize("count", [2, 1200])
@pytest.mark.parametrize("trouble", ["full", "unwritable"])
def test_a_temporary_folder_that_cannot_take_the_spool_leaves_the_writing_as_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path, count: int, trouble: str
) -> None:
    """The spool's text goes to the temporary folder, which `export -o FILE` never used before: a full one
    (/dev/full: a small spool fails at its flush, a large one at its writes) or one that cannot give a file
    loses only the spool's text. The export, its file and the fields kept are as without it."""

    def temporary() -> Any:
        if trouble == "unwritable":
            raise PermissionError(13, "Permission denied", "/tmp")
        return open("/dev/full", "w+b")  # the spool closes it

    monkeypatch.setattr("sparkwatch.window_spool.tempfile.TemporaryFile", temporary)
    with WindowSpool(keep=JUDGED_FIELDS) as spool:
        export = build_export(
            RUN,
            [node("spark-1", 10.0, 60.0, [(20, 30)], 8.0)],
            many_windows(count),
            "0.1.0",
            windows_tap=spool,
        )
        out = tmp_path / "out.json"
        write_export(out, export, spool)
        assert not spool.holds(count) and list(spool.pieces()) == []
        assert spool.kept(count) == [
            {k: w[k] for k in JUDGED_FIELDS} for w in json.loads(out.read_bytes())["windows"]
        ]
    assert out.read_bytes() == written(export)


@pytest.mark.parametrize("count", [0, 1, 2, 500, 501, 1001])
def test_the_wire_form_answers_what_json_pieces_makes(count: int) -> None:
    """The coordinator's answer (``GET /v1/runs/{id}/export``): the export's compact JSON, its windows
    from a spool of the API's form, byte for byte what json_pieces makes of them (non-ASCII as UTF-8)."""
    accented = [Window("réponse", "timed", T0 + 21 * S, T0 + 22 * S)] if count else []
    windows = [*many_windows(count), *accented]
    with WindowSpool(wire_form=True) as spool:
        made, tap = counted(spool)
        export = build_export(
            RUN, [node("spark-1", 10.0, 60.0, [(20, 30)], 8.0)], windows, "0.1.0", windows_tap=tap
        )
        answer = b"".join(wire_pieces(export, spool))
        assert sum(made) == len(windows) and spool.holds(len(windows)) is bool(windows)
        assert answer == b"".join(json_pieces(export)) and sum(made) == 2 * len(windows)
        assert json.loads(answer)["windows"] == json.loads(b"".join(json_pieces(export)))["windows"]
    with WindowSpool(wire_form=True) as missed:  # a spool that saw no pass: the windows made as before
        assert b"".join(wire_pieces(export, missed)) == answer


def test_a_spool_of_the_other_form_or_past_its_room_is_not_used() -> None:
    """An indented spool handed to the API's encoder, a wire spool to the file's writer, or a spool whose
    text outgrew ``max_bytes``: each is left aside, and the windows are made as before."""
    export = build_export(RUN, [node("spark-1", 10.0, 60.0, [(20, 30)], 8.0)], many_windows(600), "0.1.0")
    for form, room in ((False, None), (True, None), (True, 1000), (False, 1000)):
        with WindowSpool(wire_form=form, max_bytes=room) as spool:
            for lo in range(0, 600, 100):
                spool(lo, export["windows"][lo : lo + 100])
            assert spool.holds(600) is (room is None)
            assert b"".join(wire_pieces(export, spool)) == b"".join(json_pieces(export))
            assert written(export, spool) == written(export)
