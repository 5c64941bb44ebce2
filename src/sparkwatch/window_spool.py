"""An export's windows as its file has them, encoded once, on the first pass that makes them.

The export's windows are columns made into dicts a slice at a time, every time they are read
(core.window_rows). `sparkwatch export -o` read them three times: for the digest, which the export's
``lmx`` notes quote, for the file, and for the quality line. That was about 0.6 s each for an 8 h run with
10 000 windows.

A :class:`WindowSpool` is the export's windows tap (``core.window_rows.WindowsTap``). It sees the first
pass, the digest's, and does two things with each slice. It writes the slice into a temporary file as the
export's file has it: indented, at depth 2, by :func:`indented_items`, as the writer encodes it (in the
wire form, compact, as the coordinator's ``GET /v1/runs/{id}/export`` answers: :func:`wire_pieces`). It
also keeps the few fields the quality line reads. The writer then copies those bytes instead of making the
windows again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence, Sized
from types import TracebackType
from typing import Any, BinaryIO

import orjson

#: Bytes read at a time from the spool.
READ_BYTES = 1 << 20
INDENTED = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY


def shifted(encoded: bytes, spaces: int) -> bytes:
    """Indented JSON moved ``spaces`` deeper (JSON text holds no raw newline but between tokens)."""
    return encoded.replace(b"\n", b"\n" + b" " * spaces)


def indented_items(items: Sequence[Any]) -> bytes:
    """A slice of a top-level list's items as the export's file has them (at depth 2), without the list's
    brackets: slices joined by ``,`` make the list's inside, whatever their lengths."""
    return shifted(orjson.dumps(list(items), option=INDENTED)[1:-2], 2)


def wire_items(items: Sequence[Any]) -> bytes:
    """The same in the API's compact JSON (``json_pieces.wire``): what ``json_pieces`` makes of them."""
    from sparkwatch.core.json_pieces import wire  # noqa: PLC0415  (numpy: not for `runs mark`, via outputs)

    return wire(list(items))[1:-1]


class WindowSpool:
    """The windows of one export, as the first pass over them made them, from the first in order; ``keep``:
    the fields kept of each window (:meth:`kept`); ``text``: whether their text is spooled (not where no
    export is written); ``wire_form``: the API's compact JSON instead of the file's; ``max_bytes``: the most
    text it takes (a long-lived coordinator's temporary folder is no place for a 500 000-window answer). A
    slice out of that order (a hole) leaves the spool unusable. So, for the text alone, do a value orjson
    refuses, a non-ASCII character in the file's form (the writer hands both to json), text past
    ``max_bytes`` and a temporary folder that cannot take it (full, unwritable): the writer then makes the
    windows as before, and the spool's own trouble is never the caller's. Later passes are not kept. The
    spool answers for one export: its caller hands it to that export's writer only."""

    def __init__(
        self,
        keep: Sequence[str] = (),
        *,
        text: bool = True,
        wire_form: bool = False,
        max_bytes: int | None = None,
    ) -> None:
        self._file = _temporary() if text else None
        self.wire_form = wire_form  # compact, as the API answers (any text: the wire is UTF-8, not json's)
        self._room = max_bytes  # the bytes it may still take (None: no limit)
        self._keep = tuple(keep)
        # a column per kept field, of the windows' own values: no object made per window while the export
        # is made (the dicts judge reads are made when it asks)
        self._kept: list[list[Any]] = [[] for _ in self._keep]
        self._made = 0  # the windows seen, [0, _made)
        self._in_order = True  # every slice from the first, none missed
        self._flushed = False

    def __call__(self, lo: int, windows: list[Any]) -> None:
        if lo < self._made or not self._in_order:  # a later pass, or a spool given up on
            return
        if lo > self._made or not windows:
            self._in_order = False
            return
        if self._file is not None and not self._spooled(lo, windows, self._file):
            self._drop_text()
        for column, key in zip(self._kept, self._keep, strict=True):
            column += [w[key] for w in windows]
        self._made = lo + len(windows)

    def _spooled(self, lo: int, windows: list[Any], into: BinaryIO) -> bool:
        try:
            piece = (b"," if lo else b"") + (wire_items if self.wire_form else indented_items)(windows)
            if not self.wire_form and not piece.isascii():
                return False
            if self._room is not None:
                self._room -= len(piece)
                if self._room < 0:
                    return False
            into.write(piece)
        except (TypeError, OSError):  # a value orjson refuses (the writer's own pass raises it); no room
            return False
        return True

    def holds(self, count: int) -> bool:
        """Whether the spool holds the text of all ``count`` windows (at least one), written out."""
        if self._file is None or not self._whole(count) or count == 0:
            return False
        if not self._flushed:
            try:
                self._file.flush()
            except OSError:
                self._drop_text()
                return False
            self._flushed = True
        return True

    def kept(self, count: int) -> list[dict[str, Any]] | None:
        """The kept fields of all ``count`` windows, or None where the spool did not see them all."""
        if not self._whole(count):
            return None
        if not self._keep:
            return [{} for _ in range(count)]
        return [dict(zip(self._keep, values, strict=True)) for values in zip(*self._kept, strict=True)]

    def _whole(self, count: int) -> bool:
        return self._in_order and self._made == count

    def pieces(self) -> Iterator[bytes]:
        """The spooled text, from its start (the windows' items in its form; without the list's brackets)."""
        if self._file is None:
            return
        self._file.seek(0)
        while chunk := self._file.read(READ_BYTES):
            yield chunk

    def _drop_text(self) -> None:
        if self._file is not None:
            _closed(self._file)
            self._file = None

    def close(self) -> None:
        self._drop_text()
        self._in_order = False  # closed: it holds nothing
        self._kept = [[] for _ in self._keep]

    def __enter__(self) -> WindowSpool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def wire_pieces(export: dict[str, Any], spool: WindowSpool) -> Iterator[bytes]:
    """``json_pieces(export)`` (the API's compact JSON), byte for byte, its windows copied from ``spool``
    (``wire_form``) where it holds them all; else made again, as before."""
    from sparkwatch.core.json_pieces import json_pieces, wire  # noqa: PLC0415  (as in wire_items)

    windows = export.get("windows")
    if not spool.wire_form or not isinstance(windows, Sized) or not spool.holds(len(windows)):
        yield from json_pieces(export)
        return
    yield b"{"
    for n, (key, value) in enumerate(export.items()):
        yield (b"," if n else b"") + wire(str(key)) + b":"
        if key == "windows":
            yield b"["
            yield from spool.pieces()
            yield b"]"
        else:
            yield from json_pieces(value)
    yield b"}"


def _temporary() -> BinaryIO | None:
    """A temporary file for the spool, or None where the temporary folder cannot give one."""
    try:
        return tempfile.TemporaryFile()  # closed by WindowSpool.close
    except OSError:
        return None


def _closed(file: BinaryIO) -> None:
    """``file`` closed; a flush that fails there (a full disk) loses only the spool's own text."""
    try:
        file.close()
    except OSError:
        file.close()  # the file object is closed after a failed flush too; a second close is a no-op
