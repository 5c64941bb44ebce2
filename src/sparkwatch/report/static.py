"""The report's figures as static images (PNG and SVG) for papers and lmx submissions, drawn by vl-convert
from the same Vega-Lite spec as the page, without a browser: one image per node, its four panels on one
time axis with the window bands."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from sparkwatch.outputs import write_atomically
from sparkwatch.report import charts

ImageFormat = Literal["png", "svg"]
PNG_SCALE = 2.0  # pixels per CSS pixel: sharp in print and on a high-density screen


def image_name(run_id: str, node: str, fmt: ImageFormat) -> str:
    """A file name safe on every file system: the run and the node, odd characters as ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{run_id}-{node}") + f".{fmt}"


def render(spec: dict[str, Any], fmt: ImageFormat) -> bytes:
    import vl_convert  # noqa: PLC0415 — loaded only when images are asked for

    if fmt == "png":
        return bytes(vl_convert.vegalite_to_png(spec, scale=PNG_SCALE))
    return str(vl_convert.vegalite_to_svg(spec)).encode()


def write_images(export: dict[str, Any], folder: Path, fmt: ImageFormat) -> list[Path]:
    """One image per node in ``folder`` (which must exist); returns the paths written. Nothing is
    written for an export without a ``series`` block (the caller says so)."""
    figures = charts.figures(export)
    if figures is None:
        return []
    written = []
    for i, (node, spec) in enumerate(zip(export["series"]["nodes"], figures.per_node, strict=True)):
        path = folder / image_name(export["run"]["id"], node["node"], fmt)
        columns = {k: v for k, v in figures.columns.items() if k in charts.SHARED or k.startswith(f"n{i}_")}
        write_atomically(path, render(charts.with_rows(spec, columns), fmt))
        written.append(path)
    return written
