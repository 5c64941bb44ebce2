"""JSON and TOML a person hands sparkwatch (a harness's result file, an export, an lmx payload, a config or
nodes file, an API body), read so that every way it can be wrong is one line.

Python's own parsers let through what fails later, as a traceback far from the file: ``1e400`` reads as
``inf``, ``10**400`` as an integer that ``float()`` and ``math.isfinite`` raise OverflowError on, a
5000-digit integer as a ValueError that tells the user to call ``sys.set_int_max_str_digits``, and JSON or
TOML nested a few thousand deep as a RecursionError. Here each is a :class:`TextFormatError`; and a
number that a message quotes back (:func:`quoted_number`) is a few characters, not 400 digits.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from typing import Any

#: An integer of more digits is past a double's range (about 1.8e308): no figure can be made of it.
MAX_INT_DIGITS = 308
#: How much of a refused number a message quotes.
SHOWN_CHARS = 24
#: An integer of more digits is cut short where a message quotes it.
QUOTED_DIGITS = 30


class TextFormatError(ValueError):
    """Why a text is not what it should be, as a predicate: ``f"{path} {exc}"`` is the one line (JSON), or
    the detail after "not valid TOML: " (TOML)."""


class _Refused(Exception):
    """A number or constant met while parsing that the result may not hold."""


def loads_json(text: str | bytes, *, unique_keys: bool = False) -> Any:
    """Standard JSON (bytes as UTF-8, never guessed as UTF-16, a leading byte order mark passed over as
    RFC 8259 lets a reader do: Windows editors write one), refusing NaN and Infinity, numbers past a
    double's range and nesting past the parser's stack. ``unique_keys``: an object that names a key twice
    is refused too (a request's body, where "the last one wins" would act on a value the sender may not
    have meant; RFC 8259 leaves such an object's meaning to the reader)."""
    if isinstance(text, bytes):
        text = decode_utf8(text).removeprefix("\ufeff")
    hook = _unique_pairs if unique_keys else None
    try:
        return json.loads(
            text, parse_constant=_constant, parse_float=_float, parse_int=_int, object_pairs_hook=hook
        )
    except _Refused as exc:
        raise TextFormatError(str(exc)) from None
    except json.JSONDecodeError as exc:
        what = exc.msg.removesuffix(" at")  # "Unterminated string starting at": not "at at line"
        raise TextFormatError(f"is not JSON ({what} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise TextFormatError("is JSON nested too deep to read") from None


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):  # the usual object pays for the dict alone
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"names the key {json.dumps(key)[: SHOWN_CHARS + 2]} twice in one object")
            seen.add(key)
    return found


def decode_utf8(raw: bytes, verb: str = "is ") -> str:
    """``raw`` as UTF-8 text; else which byte is not (JSON is UTF-8, and TOML too). ``verb``: what the
    message starts with ("is not UTF-8 text", or "not UTF-8 text" after "not valid TOML: ")."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TextFormatError(
            f"{verb}not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None


def loads_toml(text: str | bytes) -> dict[str, Any]:
    """TOML (bytes as UTF-8, TOML's only encoding: never the locale's; a leading BOM skipped); a file too
    deep for the parser, or with an integer past 64 bits (TOML's own bound, which tomllib does not apply:
    ``float()`` of one raised OverflowError far from the file), is refused like any other invalid TOML (the
    error's text is the detail after "not valid TOML: ")."""
    if isinstance(text, bytes):
        text = decode_utf8(text, verb="")
    try:  # a leading byte order mark (an editor's) passed over, as JSON's reader does: tomllib refused it
        data = tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise TextFormatError(str(exc)) from None
    except RecursionError:
        raise TextFormatError("nested too deep to read") from None
    except ValueError:  # int() of more digits than Python converts: not a TOMLDecodeError
        raise TextFormatError("an integer too long to read") from None
    past = _past_64_bits(data)
    if past is not None:
        raise TextFormatError(f"an integer past 64 bits ({quoted_number(past)})")
    return data


def _past_64_bits(value: Any) -> int | None:
    """The first integer in a parsed TOML document outside TOML's signed 64-bit range, if any."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return next((p for p in map(_past_64_bits, value) if p is not None), None)
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return value
    return None


def whole_number(text: str) -> int:
    """``int()`` of a number as typed (a CSV cell, a flag's value) that is not past a double's range: more
    digits are a TextFormatError saying how many, where ``int()`` tells the user to call
    ``sys.set_int_max_str_digits`` (or takes seconds, for a million digits); a ValueError as ``int()``'s
    for what is not a number."""
    digits = len(text.strip().lstrip("+-"))
    if digits > MAX_INT_DIGITS:
        raise TextFormatError(f"an integer of {digits} digits, a number too large to store")
    return int(text)


def _constant(name: str) -> Any:
    raise _Refused(f"contains {name}, not a number JSON allows (null says unknown)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"contains {cut_short(text)}, a number too large to store")
    return value


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"contains an integer of {digits} digits, a number too large to store")
    return int(text)


def utf8_escaped(text: str) -> str:
    """``text`` with each byte Python could not decode as UTF-8 (a command line's: surrogate-escaped, as
    ``\\udcff``) written as ``\\xff``, which JSON can carry; ``text`` itself when it has none."""
    if not _SURROGATES.search(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte became: not from a command line
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


_SURROGATES = re.compile("[\ud800-\udfff]")


_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def one_line(text: str) -> str:
    """``text`` with each control character (a newline, an escape sequence's ESC) written as its ``\\n``
    or ``\\x1b`` escape: an error line quoting what a user typed stays one line, and a terminal is not
    driven by it."""
    return _CONTROLS.sub(lambda m: ascii(m.group())[1:-1], text) if _CONTROLS.search(text) else text


def cut_short(text: str, width: int = SHOWN_CHARS) -> str:
    """``text`` as a message quotes it: ``width`` characters at most, the last an ellipsis where cut."""
    return text if len(text) <= width else f"{text[: width - 1]}…"


def quoted_number(value: int | float) -> str:
    """A number for a one-line message: as it is, but an integer of more than :data:`QUOTED_DIGITS` digits
    (past every 64-bit value) as its first digits and how many there are (a file's ``10**300`` is not 301
    digits of error). A float's text is short whatever its size (``1e+300``)."""
    if isinstance(value, float):
        return str(value)
    sign, digits = ("-" if value < 0 else ""), str(abs(value))
    if len(digits) <= QUOTED_DIGITS:
        return f"{sign}{digits}"
    return f"{sign}{digits[:10]}… ({len(digits)} digits)"
