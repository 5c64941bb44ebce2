"""Files sparkwatch writes for people (exports, hardware.json, edited lmx payloads): whole or not at all."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, TextIO

import orjson

from sparkwatch.core.window_rows import WindowRows, is_rows, plain
from sparkwatch.window_spool import INDENTED, WindowSpool, indented_items, shifted

#: Bytes copied at a time from a spooled export to stdout.
COPY_BYTES = 1 << 20
#: A list longer than this is written this many items at a time (one orjson call each: a call per item cost
#: more, the whole list at once held its text).
LIST_ITEMS_AT_ONCE = 500


class OutputError(Exception):
    """An output path that cannot be written; one line naming it and why."""


def check_output(
    path: Path,
    reads: Mapping[Path, str] = MappingProxyType({}),
    *,
    json_on_stdout: bool = False,
    flag: str = "-o",
) -> None:
    """Refuse before anything starts when a file could not be written at the end, or would replace one the
    command reads (``reads``: each such file and what to call it), or is stdout where the command prints
    its one JSON object (``json_on_stdout``: ``--json``). ``flag``: the option that named ``path``."""
    try:
        resolved = path.resolve()
    except (RuntimeError, OSError):  # Python 3.11's resolve() raises RuntimeError for a loop
        raise OutputError(f"cannot write {path}: its symbolic links loop") from None
    for source, what in reads.items():
        if resolved == source.resolve():
            raise OutputError(f"{flag} {path} is {what} itself: what is written would replace it")
    if _is_sqlite(path):  # after the files the command reads: those are named for what they are
        raise OutputError(
            f"{flag} {path} is a SQLite database (a coordinator's?): what is written would replace it;"
            " give another file"
        )
    if json_on_stdout and own_descriptor(path) == 1:
        raise OutputError(f"-o {path} is stdout, where --json prints its one JSON object: give -o a file")
    if not_a_file(path):  # a device or a pipe is written into: its own permission is what counts
        if not os.access(path, os.W_OK):
            raise OutputError(f"cannot write {path}: it is not writable")
        return
    folder = through_link(path).parent  # a link's file is written where it points
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise OutputError(f"cannot write {path}: folder {folder} {why}")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"cannot write {path}: folder {folder} is not writable")
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder")
    try:  # root passes every access check: /proc or a read-only mount says no only when tried
        _try_a_file_in(folder)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise OutputError(f"cannot write {path}: folder {folder} takes no new file ({why})") from None


def database_files(db: Path) -> dict[Path, str]:
    """A SQLite database's files, for :func:`check_output`'s ``reads``: an output may be none of them (a
    coordinator may be writing to it, and SQLite keeps its WAL and index beside the file a link points at)."""
    db = db.resolve()
    # the lock's name is store/writer_lock.lock_path's (not imported here: the store costs 0.5 s to load)
    wal, shm, lock = (db.with_name(f"{db.name}{end}") for end in ("-wal", "-shm", ".lock"))
    return {
        db: "the database",
        wal: "the database's WAL",
        shm: "the database's shared-memory index",
        lock: "the database's writer lock",  # replaced, it lets a second coordinator write the database
    }


#: How every SQLite database file begins (its header's magic string).
SQLITE_MAGIC = b"SQLite format 3\x00"


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a regular file holding a SQLite database: no output of sparkwatch is one, and
    replacing a coordinator's lost everything it stored (it went on writing to the unlinked file)."""
    try:  # stat first: opening a pipe to read would wait for its writer
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with path.open("rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _try_a_file_in(folder: Path) -> None:
    """Make a file in ``folder`` and let it go: an unnamed one (O_TMPFILE) where the file system has them,
    so nothing is left behind even where a file can be made but not removed (``chattr +a``)."""
    try:
        os.close(os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o600))
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".sparkwatch-check-"):
        pass


def write_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write beside ``path`` and rename over it, so a reader never sees half a file; ``mode`` (permission
    bits, default: those of the file replaced) is set before the rename. The temporary file is removed when
    anything fails, and the error names ``path``, the file asked for, not the temporary one. Into a device
    or a pipe (``-o /dev/null``), the bytes go straight in: renaming over it would replace it with a file."""
    if not_a_file(path):
        _write_into(path, lambda f: f.write(data))
        return
    final = through_link(path)
    tmp = final.with_name(f".{final.name}.sparkwatch-tmp")
    try:
        tmp.write_bytes(data)
        _keep_mode(tmp, final, mode)
        tmp.replace(final)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _keep_mode(tmp: Path, final: Path, mode: int | None = None) -> None:
    """Give ``tmp`` the permission bits ``mode``, else those of the ``final`` it replaces: a 0640 file
    rewritten stays 0640 (the new file's were the umask's), as an edit in place would leave it."""
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(final).st_mode)
        except FileNotFoundError:
            return
    os.chmod(tmp, mode)


def size_text(size_bytes: int) -> str:
    """Bytes in the largest decimal unit under which the size is at least 1 (a short run's samples are a
    few kB: "0.0 MB" would say none)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes} B"


def not_a_file(path: Path) -> bool:
    """Whether ``path`` is written into, never replaced: one of this process's open descriptors
    (/dev/stdout, /dev/fd/N: a shell's ``> log`` or ``>> log`` is a file, and renaming over it lost what
    was there and all that was printed after), or something that exists (its links followed) as other than
    a regular file or folder: a device or a pipe."""
    if own_descriptor(path) is not None:
        return True
    try:
        kind = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(kind) or stat.S_ISDIR(kind))


#: A link to an open descriptor, as the kernel shows it: /proc/self/fd/N (/dev/stdout's, /dev/fd's).
_DESCRIPTOR = re.compile(r"/proc/(?:self|thread-self|(\d+))(?:/task/\d+)?/fd/(\d+)")


def own_descriptor(path: Path) -> int | None:
    """The descriptor of this process that ``path`` names through its links (/dev/stdout → 1), else None."""
    at = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        folder, name = os.path.split(at)
        named = _DESCRIPTOR.fullmatch(os.path.join(os.path.realpath(folder), name))
        if named is not None and named[1] in (None, str(os.getpid()), _proc_self()):
            return int(named[2])
        if named is not None or not os.path.islink(at):
            return None
        at = os.path.normpath(os.path.join(folder, os.readlink(at)))
    return None


def _proc_self() -> str:
    """This process's pid as the mounted /proc numbers it (another pid namespace's /proc may differ)."""
    return os.path.basename(os.path.realpath("/proc/self"))


def _write_into(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write into ``path`` as it is (a device or a pipe) opened by its own name (/dev/stdout's link points
    at a pipe that has no name of its own to open); one of this process's descriptors is written through
    itself, where what this process printed already is (opened again, a file would be cut to nothing)."""
    fd = own_descriptor(path)
    try:
        if fd is None:
            with open(path, "wb") as f:
                write(f)
            return
        for stream in (sys.stdout, sys.stderr):  # what was printed goes first
            stream.flush()
        with os.fdopen(os.dup(fd), "wb") as f:
            write(f)
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def through_link(path: Path) -> Path:
    """Where a write to ``path`` lands: a symlink's target (renaming over the link would turn it into a
    file of its own and leave the file it points to as it was), else ``path``."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def write_text_atomically(path: Path, text: str) -> None:
    write_atomically(path, text.encode())


def export_text(export: dict[str, Any]) -> str:
    """The export as people read it: indented, except its ``series`` block (the plot data: tens of
    thousands of numbers), which stays on one line at the end instead of one number per line (2.6× the
    bytes). orjson writes it (json's indenting encoder is pure Python: 5 s for an 8 h run's 10 000
    windows); an export with a non-ASCII character (a run's name) is written by json, escaped as before."""
    out = io.BytesIO()
    write_export_to(out, export)
    return out.getvalue().decode()


def print_export(export: dict[str, Any], out: TextIO, windows: WindowSpool | None = None) -> None:
    """:func:`export_text` to a text stream (stdout): its bytes to the stream's buffer, not through a str,
    by way of a temporary file (the writer may start over, so it needs a file it can seek in; the text of an
    8 h export is ~50 MB, held in memory it was a third of the process's peak). ``windows``: see
    :func:`write_export_to`."""
    raw = getattr(out, "buffer", None)
    if raw is None:  # a stream of text only (a caller's StringIO)
        out.write(export_text(export))
        return
    with tempfile.TemporaryFile() as spool:
        write_export_to(spool, export, windows)
        spool.seek(0)
        out.flush()
        raw.flush()
        try:
            fd = raw.fileno()
        except (AttributeError, OSError, ValueError):  # a buffer with no descriptor (a caller's BytesIO)
            shutil.copyfileobj(spool, raw, COPY_BYTES)
            raw.flush()
            return
        _write_all(fd, spool)


def _spooled(out: BinaryIO, export: dict[str, Any], windows: WindowSpool | None) -> None:
    with tempfile.TemporaryFile() as spool:
        write_export_to(spool, export, windows)
        spool.seek(0)
        _write_all(out.fileno(), spool)


def _write_all(fd: int, source: BinaryIO) -> None:
    """Every byte of ``source`` to ``fd``, a short write continued: through the buffered writer, a pipe
    whose reader left mid-write (`| head -c 10`) ended a write short, the rest was dropped unsaid and the
    command exited 0; here the next write fails with EPIPE, BrokenPipeError, exit 141."""
    while chunk := source.read(COPY_BYTES):
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def write_export(path: Path, export: dict[str, Any], windows: WindowSpool | None = None) -> None:
    """:func:`export_text` into ``path``, whole or not at all, written as it is encoded: an 8 h run's
    export is ~50 MB of text, never held at once (nor as bytes, text and bytes again)."""
    if not_a_file(path):  # no seeking in a pipe: the export is made in a spool, then copied in
        _write_into(path, lambda f: _spooled(f, export, windows))
        return
    final = through_link(path)
    tmp = final.with_name(f".{final.name}.sparkwatch-tmp")
    try:
        with open(tmp, "wb") as f:
            write_export_to(f, export, windows)
        _keep_mode(tmp, final)
        tmp.replace(final)
    except BaseException as exc:  # a full disk, a value orjson refuses, an interrupt: no half file is left
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is not None:  # named as asked, not the temporary file
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def write_export_or_spare(output: Path, export: dict[str, Any], spare_name: str, said: TextIO) -> Path:
    """The export written to ``output``, else (that failing: a full disk, a folder gone) to ``spare_name``
    in the temporary folder, said on ``said``; returns where. A measured run is not thrown away for a path
    (`demo -o /dev/full` lost the whole demo)."""
    try:
        write_export(output, export)
        return output
    except OSError as exc:
        spare = Path(tempfile.gettempdir()) / spare_name
        write_export(spare, export)  # a failure here is the one-line error main() prints
        said.write(f"sparkwatch: cannot write {output} ({exc.strerror}); the export is in {spare}\n")
        return spare


def write_export_to(out: BinaryIO, export: dict[str, Any], windows: WindowSpool | None = None) -> None:
    """:func:`export_text`'s bytes into ``out``, key by key and a long list item by item (each indented as
    orjson indents the whole, shifted to its depth: JSON text never holds a raw newline but between
    tokens). A non-ASCII piece starts it over with json, whole, from where ``out`` began. ``windows``: the
    export's windows already encoded as they were made (window_spool), copied where it holds them all."""
    start = out.tell()
    body = [(k, v) for k, v in export.items() if k != "series"]
    if not body:
        out.write(b"{}")
    else:
        out.write(b"{")
        for n, (key, value) in enumerate(body):
            head = (b"," if n else b"") + b"\n  " + orjson.dumps(key) + b": "
            spooled = windows if key == "windows" else None
            for piece in _indented_pieces(value, head, spooled):
                if not piece.isascii():
                    out.seek(start)
                    out.truncate()
                    text = json.dumps(dict(body), indent=2, default=plain)
                    out.write(text.encode())
                    return _close(out, export, text == "{}")
                out.write(piece)
        out.write(b"\n}")
    _close(out, export, not body)


def _indented_pieces(value: Any, head: bytes, spooled: WindowSpool | None = None) -> Iterator[bytes]:
    """A top-level value after ``head``, at depth 1: a long list (the windows) a slice at a time, or from
    ``spooled`` (which holds its items as these slices would be written)."""
    if spooled is not None and not spooled.wire_form and spooled.holds(len(value)):
        yield head + b"["
        yield from spooled.pieces()
        yield b"\n  ]"
    elif is_rows(value) and len(value) > LIST_ITEMS_AT_ONCE:
        yield head + b"["
        for start in range(0, len(value), LIST_ITEMS_AT_ONCE):
            yield (b"," if start else b"") + indented_items(value[start : start + LIST_ITEMS_AT_ONCE])
        yield b"\n  ]"
    elif isinstance(value, WindowRows):  # a few windows: one list
        yield head + shifted(orjson.dumps(list(value), option=INDENTED), 2)
    else:
        yield head + shifted(orjson.dumps(value, option=INDENTED), 2)


def _close(out: BinaryIO, export: dict[str, Any], empty: bool) -> None:
    """The ``series`` block on one line at the end (or only the final newline)."""
    series = export.get("series")
    if series is None or empty:
        out.write(b"\n")
        return
    out.seek(out.tell() - 2)  # over the body's closing "\n}"
    plot = orjson.dumps(series, option=orjson.OPT_SERIALIZE_NUMPY)
    out.write(b',\n  "series": ' + plot + b"\n}\n")


#: C0 controls, DEL and the C1 controls (a terminal may read 0x9b as CSI).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def command_line(argv: Sequence[str]) -> str:
    """A wrapped command's words as a shell takes them back (``sh -c 'for i in 1 2; do …'``, not its words
    run together), :func:`shown` for a terminal."""
    return shown(shlex.join(argv))


def shown(text: str) -> str:
    """Text from elsewhere (a run's name, a wrapped command's words, as the API took them) safe to print on
    a terminal: a control character as ``\\xNN`` instead of raw (a NUL, an ESC or a C1 CSI starting an
    escape sequence, a newline that would break a table row); every other character as it is."""
    return CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)
