"""An export's windows as its file has them, encoded once, on the first pass that makes them.

The export's windows are columns made into dicts a slice at a time, every time they are read
(core.window_rows). `sparkwatch export -o` read them three times: for the digest, which the export's
``lmx`` notes quote, for the file, and for the quality line. That was about 0.6 s each for an 8 h run with
10 000 windows.

A :class:`WindowSpool` is the export's windows tap (``core.window_rows.WindowsTap``). It sees the first
pass, the digest's, and does two things with each slice. It writes the slice into a temporary file as the
export's file has it: indented, at depth 2, by :func:`indented_items`, as the writer encodes it. It also
keeps the few fields the quality line reads. The writer then copies those bytes instead of making the
windows again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
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


class WindowSpool:
    """The windows of one export, as the first pass over them made them, from the first in order; ``keep``:
    the fields kept of each window (:meth:`kept`); ``text``: whether their text is spooled (not where no
    export is written). A slice out of that order (a hole), a value orjson
    refuses or a non-ASCII character (which the writer hands to json) leaves the spool unusable: the writer
    then makes the windows as before. Later passes are not kept."""

    def __init__(self, keep: Sequence[str] = (), *, text: bool = True) -> None:
        self._file = tempfile.TemporaryFile() if text else None  # noqa: SIM115  (closed by close())
        self._keep = tuple(keep)
        # a column per kept field, of the windows' own values: no object made per window while the export
        # is made (dicts made then were 20 MB more at the peak of `export --table`, interleaved with the
        # windows' and left behind as they went)
        self._kept: list[list[Any]] = [[] for _ in self._keep]
        self._made = 0  # the windows spooled, [0, _made)
        self._usable = True

    def __call__(self, lo: int, windows: list[Any]) -> None:
        if lo < self._made or not self._usable:  # a later pass, or a spool given up on
            return
        if lo > self._made or not windows:
            self._usable = False
            return
        if self._file is not None and not self._spooled(lo, windows, self._file):
            self._usable = False
            return
        for column, key in zip(self._kept, self._keep, strict=True):
            column += [w[key] for w in windows]
        self._made = lo + len(windows)

    @staticmethod
    def _spooled(lo: int, windows: list[Any], into: BinaryIO) -> bool:
        try:
            piece = (b"," if lo else b"") + indented_items(windows)
        except TypeError:  # a value orjson refuses: the writer's own pass raises it, as before
            return False
        if not piece.isascii():
            return False
        into.write(piece)
        return True

    def holds(self, count: int) -> bool:
        """Whether the spool holds the text of all ``count`` windows (at least one)."""
        return self._file is not None and self._whole(count) and count > 0

    def kept(self, count: int) -> list[dict[str, Any]] | None:
        """The kept fields of all ``count`` windows, or None where the spool did not see them all."""
        if not self._whole(count):
            return None
        return [dict(zip(self._keep, values, strict=True)) for values in zip(*self._kept, strict=True)]

    def _whole(self, count: int) -> bool:
        return self._usable and self._made == count

    def pieces(self) -> Iterator[bytes]:
        """The spooled text, from its start (the windows' items, indented; without the list's brackets)."""
        if self._file is None:
            return
        self._file.seek(0)
        while chunk := self._file.read(READ_BYTES):
            yield chunk

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._kept = [[] for _ in self._keep]

    def __enter__(self) -> WindowSpool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
