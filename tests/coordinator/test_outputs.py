"""The export file (outputs.py): written as it is encoded, byte for byte what one indented dump of the whole
makes — orjson's two-space indent, json's where a character is not ASCII — with the plot data on one line
at the end; and whole or not at all."""

from __future__ import annotations

import io
import json
import os
import pathlib
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch.commands.report_cmd import write_report_beside
from sparkwatch.outputs import (
    LIST_ITEMS_AT_ONCE,
    OutputError,
    check_output,
    database_files,
    export_text,
    print_export,
    write_atomically,
    write_export,
    write_text_atomically,
)
from sparkwatch.proxy.spill import spill_path_beside
from sparkwatch.store.writer_lock import lock_path

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT
SCALARS |= st.floats(allow_nan=False, allow_infinity=False)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def whole(export: dict[str, Any]) -> str:
    """The export's text as one dump of the whole makes it (the form the file has always had)."""
    body = {k: v for k, v in export.items() if k != "series"}
    text = orjson.dumps(body, option=orjson.OPT_INDENT_2).decode()
    if not text.isascii():
        text = json.dumps(body, indent=2)
    series = export.get("series")
    if series is None or text == "{}":
        return text + "\n"
    return f'{text[:-2]},\n  "series": {orjson.dumps(series).decode()}\n}}\n'


@settings(max_examples=150, deadline=None)
@given(
    head=st.dictionaries(st.sampled_from(["schema", "run", "nodes", "totals", "lmx"]), VALUES, max_size=5),
    window=st.dictionaries(TEXT, VALUES, max_size=4),
    count=st.sampled_from([0, 1, LIST_ITEMS_AT_ONCE, LIST_ITEMS_AT_ONCE + 1]),
    series=st.none() | VALUES,
)
def test_the_streamed_file_is_the_whole_dumped_at_once(
    head: dict[str, Any],
    window: dict[str, Any],
    count: int,
    series: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    export = {**head, "windows": [window] * count}
    if series is not None:
        export["series"] = series
    expected = whole(export)
    assert export_text(export) == expected
    path = tmp_path_factory.mktemp("out") / "export.json"
    write_export(path, export)
    assert path.read_bytes() == expected.encode()


def test_a_file_that_cannot_be_written_leaves_nothing_behind(tmp_path: pathlib.Path) -> None:
    class Unwritable:
        def __repr__(self) -> str:
            return "unwritable"

    path = tmp_path / "export.json"
    path.write_text("the old export\n")
    with pytest.raises(TypeError):
        write_export(path, {"windows": [{"id": 1}] * (LIST_ITEMS_AT_ONCE + 1) + [{"x": Unwritable()}]})
    assert path.read_text() == "the old export\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "export.json"
    ]


def test_a_write_that_fails_names_the_file_asked_for_not_the_temporary_one(tmp_path: pathlib.Path) -> None:
    """The user's message names the path they gave, not ``.x.json.sparkwatch-tmp`` beside it."""
    for path in (tmp_path / "missing" / "x.json", tmp_path):  # no such folder; a folder in the way
        for write in (lambda p: write_atomically(p, b"{}"), lambda p: write_export(p, {"x": 1})):
            with pytest.raises(OSError) as caught:
                write(path)
            assert caught.value.filename == str(path) and "sparkwatch-tmp" not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_link_into_a_folder_that_cannot_be_written_is_refused_before_anything_starts(
    tmp_path: pathlib.Path,
) -> None:
    """procfs refuses even root a new entry: the check looks where the link points, not beside the link."""
    link = tmp_path / "run.json"
    link.symlink_to("/proc/self/run.json")
    with pytest.raises(OutputError, match=r"^cannot write .*run\.json: folder /proc/\d+ is not writable$"):
        check_output(link)
    with pytest.raises(OutputError, match="does not exist"):
        (tmp_path / "dangling.json").symlink_to(tmp_path / "no" / "x.json")
        check_output(tmp_path / "dangling.json")


def test_a_symlink_is_written_through_not_replaced(tmp_path: pathlib.Path) -> None:
    """A payload or export kept elsewhere behind a link: the file it points to gets the new bytes, the
    link stays a link (renaming over it made it a file of its own and left the target stale)."""
    (tmp_path / "real").mkdir()
    for write in (lambda p: write_atomically(p, b'{"x": 1}\n', 0o640), lambda p: write_export(p, {"x": 1})):
        target = tmp_path / "real" / "p.json"
        target.write_text("old\n")
        link = tmp_path / "link.json"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        write(link)
        assert link.is_symlink() and json.loads(target.read_text()) == {"x": 1}
        assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["p.json"]


def _device(tmp_path: pathlib.Path, name: str, minor: int) -> pathlib.Path:
    """A character device of the memory driver (minor 3: null, 7: full): made in ``tmp_path`` where this
    process may make one (root: a slip cannot touch the real ones), else the system's own."""
    if os.geteuid() != 0:
        return pathlib.Path("/dev") / name
    node = tmp_path / name
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return node


def test_a_device_or_a_pipe_is_written_into_not_replaced(tmp_path: pathlib.Path) -> None:
    """`-o /dev/null`, or a FIFO a reader waits on: before, the rename over it left a regular file in its
    place (as root, /dev/null and /dev/full were replaced). The bytes go in; the node stays what it was."""
    null, full = _device(tmp_path, "null", 3), _device(tmp_path, "full", 7)
    for write in (lambda p: write_atomically(p, b"{}\n"), lambda p: write_export(p, {"x": 1})):
        check_output(null)
        write(null)
        assert stat.S_ISCHR(null.stat().st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_export(fifo, {"x": 1})
    reader.join(10)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and json.loads(got[0]) == {"x": 1}
    with pytest.raises(OSError, match=str(full)):  # every write to /dev/full fails: ENOSPC
        write_export(full, {"x": 1})
    assert stat.S_ISCHR(full.stat().st_mode)
    assert not [p for p in tmp_path.iterdir() if "sparkwatch-tmp" in p.name]


def test_dev_stdout_into_a_pipe_is_written_through_its_own_name(tmp_path: pathlib.Path) -> None:
    """`sparkwatch export … -o /dev/stdout | jq`: its link leads to a pipe with no name to open (before, the
    temporary file's rename failed, FileNotFoundError)."""
    script = "import pathlib, sparkwatch.outputs as o; o.write_export(pathlib.Path('/dev/stdout'), {'x': 1})"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"x": 1}


@pytest.mark.parametrize("append", [False, True], ids=["> file", ">> file"])
def test_dev_stdout_into_a_file_is_written_through_stdout_not_replaced(
    tmp_path: pathlib.Path, append: bool
) -> None:
    """`sparkwatch export … -o /dev/stdout >> log`: /dev/stdout's link led to the file, which the rename
    replaced: the log's earlier lines were gone, and what was printed after went to the deleted file. The
    export goes through stdout itself, after what was printed before it, and before what is printed after."""
    log = tmp_path / "log"
    log.write_text("keep me\n")
    script = (
        "import pathlib, sparkwatch.outputs as o; print('before'); "
        "o.write_export(pathlib.Path('/dev/stdout'), {'x': 1}); print('after')"
    )
    with open(log, "a" if append else "w") as out:
        done = subprocess.run([sys.executable, "-c", script], stdout=out, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 0, done.stderr
    text = log.read_text()
    assert text == ("keep me\n" if append else "") + 'before\n{\n  "x": 1\n}\nafter\n'
    assert not [p for p in tmp_path.iterdir() if p.name != "log"]


def test_stdout_as_the_output_of_a_command_printing_json_is_refused(tmp_path: pathlib.Path) -> None:
    """`run --json -o /dev/stdout`: the export and the outcome object, two JSON documents on one stdout."""
    with pytest.raises(OutputError, match=r"^-o /dev/stdout is stdout, where --json prints its one JSON"):
        check_output(pathlib.Path("/dev/stdout"), json_on_stdout=True)
    check_output(pathlib.Path("/dev/stdout"))  # without --json: stdout is the export's


def test_a_folder_that_takes_no_new_file_is_refused_before_anything_starts() -> None:
    """As root every access check passes: `run -o /proc/x` measured a whole run, then could not write."""
    with pytest.raises(OutputError, match=r"^cannot write /proc/x\.json: folder /proc takes no new file \("):
        check_output(pathlib.Path("/proc/x.json"))


def test_printing_an_export_writes_the_files_bytes(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    """To stdout through its buffer (never the whole text as str); a text-only stream gets the same text."""
    export = {"run": {"name": "é"}, "windows": [{"id": n, "w": 0.5} for n in range(LIST_ITEMS_AT_ONCE + 2)]}
    print_export(export, sys.stdout)
    assert capfdbinary.readouterr().out == export_text(export).encode()
    text = io.StringIO()
    print_export(export, text)
    assert text.getvalue() == export_text(export)


def test_nothing_is_written_beside_an_export_sent_to_a_device(tmp_path: pathlib.Path) -> None:
    """`run -o /dev/null`: the report would have gone to /dev/null.report.html, and unsent proxy windows to
    /dev/null.unsent-windows.json: new files in /dev."""
    null = _device(tmp_path, "null", 3)
    said = io.StringIO()
    assert write_report_beside({}, null, said) is None and said.getvalue() == ""
    assert spill_path_beside(null).parent == pathlib.Path(tempfile.gettempdir())
    assert spill_path_beside(tmp_path / "run.json") == tmp_path / "run.unsent-windows.json"


def test_a_file_written_over_keeps_its_permission_bits(tmp_path: pathlib.Path) -> None:
    """`hardware -o hw.json` over a 0640 file left it 0644 (the new file's umask bits); an export too."""
    text_file, export_file, new_file = tmp_path / "hw.json", tmp_path / "run.json", tmp_path / "new.json"
    for path in (text_file, export_file):
        path.write_text("{}")
        path.chmod(0o640)
    write_text_atomically(text_file, '{"a": 1}')
    write_export(export_file, {"a": 1})
    assert json.loads(text_file.read_text()) == json.loads(export_file.read_text()) == {"a": 1}
    assert stat.S_IMODE(text_file.stat().st_mode) == stat.S_IMODE(export_file.stat().st_mode) == 0o640
    old = os.umask(0o027)
    try:
        write_text_atomically(new_file, "{}")  # a new file: the umask's bits, as any new file gets
    finally:
        os.umask(old)
    assert stat.S_IMODE(new_file.stat().st_mode) == 0o640


def test_a_symlink_loop_is_one_line_not_a_traceback(tmp_path: pathlib.Path) -> None:
    loop = tmp_path / "out.json"
    loop.symlink_to("out.json")  # `ln -sf out.json out.json`: resolve() raised RuntimeError
    with pytest.raises(OutputError, match="its symbolic links loop"):
        check_output(loop)


def test_a_sqlite_database_is_never_an_output_nor_a_databases_lock(tmp_path: pathlib.Path) -> None:
    """`runs export ID -o …/sw.db` replaced a running coordinator's database (it went on writing to the
    unlinked file, and all it stored was lost); `export --db f.db -o f.db.lock` replaced its lock, and a
    second coordinator could open the database."""
    db = tmp_path / "sw.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(OutputError, match=r"-o .*sw\.db is a SQLite database \(a coordinator's\?\)"):
        check_output(db)
    lock = lock_path(db)
    lock.write_text("")
    with pytest.raises(OutputError, match="is the database's writer lock itself"):
        check_output(lock, database_files(db))
    check_output(tmp_path / "run.json", database_files(db))  # any other file is fine


def test_a_file_where_the_folder_should_be_is_said_to_be_no_folder(tmp_path: pathlib.Path) -> None:
    (tmp_path / "afile").write_text("")
    with pytest.raises(OutputError, match=r"folder .*afile is not a folder"):  # it said "does not exist"
        check_output(tmp_path / "afile" / "x.json")
