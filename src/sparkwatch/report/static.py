"""The report's figures as static images (PNG and SVG) for papers and lmx submissions, drawn by vl-convert
from the same Vega-Lite spec as the page, without a browser: one image per node, its four panels on one
time axis with the window bands. Made in memory; the caller writes them once everything is made."""

from __future__ import annotations

import re
from typing import Any, Literal

from sparkwatch.report import charts

ImageFormat = Literal["png", "svg"]
PNG_SCALE = 2.0  # pixels per CSS pixel: sharp in print and on a high-density screen


def image_name(run_id: str, node: str, fmt: ImageFormat) -> str:
    """A file name safe on every file system: the run and the node, odd characters as ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{run_id}-{node}") + f".{fmt}"


#: What XML 1.0 cannot hold (C0 controls but tab, newline and return; U+FFFE, U+FFFF; lone surrogates):
#: vl-convert draws text through SVG, and one such character in a node name or a label aborted the whole
#: process with a Rust panic.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def xml_safe(value: Any) -> Any:
    """``value`` (a spec, its rows) with every string's non-XML characters written as ``\\xNN``/``\\uNNNN``
    escapes, so the figure shows what the export holds instead of failing on it."""
    if isinstance(value, str):
        return _NOT_XML.sub(lambda m: ascii(m.group())[1:-1], value) if _NOT_XML.search(value) else value
    if isinstance(value, dict):
        return {k: xml_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [xml_safe(v) for v in value]
    return value


def render(spec: dict[str, Any], fmt: ImageFormat) -> bytes:
    import vl_convert  # noqa: PLC0415 — loaded only when images are asked for

    spec = xml_safe(spec)
    if fmt == "png":
        return bytes(vl_convert.vegalite_to_png(spec, scale=PNG_SCALE))
    return str(vl_convert.vegalite_to_svg(spec)).encode()


def images(export: dict[str, Any], fmt: ImageFormat) -> list[tuple[str, bytes]]:
    """One image per node, file name and bytes (names made unique: two nodes whose names differ only in
    characters a file name cannot hold get ``-2``, ``-3``…); none for an export without a ``series``."""
    figures = charts.figures(export)
    if figures is None:
        return []
    out: list[tuple[str, bytes]] = []
    taken: set[str] = set()
    for i, (node, spec) in enumerate(zip(export["series"]["nodes"], figures.per_node, strict=True)):
        name = image_name(export["run"]["id"], node["node"], fmt)
        stem, k = name.rsplit(".", 1)[0], 2
        while name in taken:
            name, k = f"{stem}-{k}.{fmt}", k + 1
        taken.add(name)
        columns = {
            key: cols
            for key, cols in figures.columns.items()
            if key in charts.SHARED or key.startswith(f"n{i}_")
        }
        out.append((name, render(charts.with_rows(spec, columns), fmt)))
    return out
