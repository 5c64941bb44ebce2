"""`sparkwatch report EXPORT`: the run report (HTML, and PNG/SVG figures) from an export file alone, and the
report `sparkwatch run` and `sparkwatch demo` write beside their export.

The report module (Altair, vl-convert) is imported only when a report is built: every other subcommand
starts without it."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from sparkwatch.commands.export_file import load_export
from sparkwatch.defaults import SERIES_BUCKETS
from sparkwatch.outputs import (
    check_output,
    not_a_file,
    size_text,
    through_link,
    write_text_atomically,
)
from sparkwatch.report.facts import series_commands


class ReportError(Exception):
    """An export the report cannot be built from, or a folder images cannot go to: one line."""


def series_for(report: bool) -> int | None:
    """The series buckets `run` and `demo` ask the export for: the plots' data when they write a report."""
    return SERIES_BUCKETS if report else None


def report_path(export_path: Path) -> Path:
    """Where the report of ``run.json`` goes unless ``-o`` says: ``run.report.html`` beside it."""
    return export_path.with_name(f"{export_path.stem}.report.html")


def _image_folder(folder: Path | None) -> Path | None:
    if folder is None:
        return None
    if folder.exists() and not folder.is_dir():
        raise ReportError(f"cannot write images to {folder}: it is not a folder")
    if not folder.parent.is_dir():  # the folder itself is made, not a path of them (a typo's)
        raise ReportError(f"cannot write images to {folder}: folder {folder.parent} does not exist")
    where = folder if folder.is_dir() else folder.parent  # checked now, not once the page is written
    if not os.access(where, os.W_OK):
        raise ReportError(f"cannot write images to {folder}: folder {where} is not writable")
    return folder


def build_report_file(export: dict[str, Any], output: Path) -> int:
    """Write the report of ``export`` to ``output`` (whole or not at all); returns its size in bytes."""
    page = _page(export)
    write_text_atomically(output, page)
    return len(page.encode())


def _page(export: dict[str, Any]) -> str:
    from sparkwatch.report.bundle import Assets  # noqa: PLC0415
    from sparkwatch.report.page import build_page  # noqa: PLC0415 — Altair, on demand

    return build_page(export, Assets())


def write_report_beside(
    export: dict[str, Any], export_path: Path, stderr: TextIO, said_as: str = "sparkwatch"
) -> Path | None:
    """`run` and `demo`: the report beside the export they wrote; a failure is a warning (the export,
    the measurement's record, is already safe). ``said_as``: the command's prefix on its own lines."""
    if not_a_file(export_path):  # -o /dev/null: nothing beside it is for the report
        return None
    output = report_path(export_path)
    try:
        size = build_report_file(export, output)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        stderr.write(f"{said_as}: warning: the report could not be written to {output}: {exc}\n")
        return None
    stderr.write(f"{said_as}: report written to {output} ({size_text(size)})\n")
    return output


def cmd_report(args: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    """Everything is built in memory first; only then are the page and the images written, each whole."""
    png, svg = _image_folder(args.png), _image_folder(args.svg)
    export = load_export(args.export)
    output = args.output or report_path(args.export)
    check_output(output, {args.export: "the export"})
    if (png or svg) and not export.get("series"):
        raise ReportError(
            f"{args.export} has no series block, so there are no figures to draw: export the run with"
            f" {_again(export)} (run and demo include it unless --no-report)"
        )
    try:
        page = _page(export)
        made = [
            (folder, fmt, _figures(export, fmt)) for folder, fmt in ((png, "png"), (svg, "svg")) if folder
        ]
    except (KeyError, TypeError, ValueError, IndexError, ArithmeticError) as exc:  # the sampled check missed
        raise ReportError(f"cannot build the report of {args.export}: {type(exc).__name__} {exc}") from None
    staged = _stage_figures(made)  # first: a figure that cannot be written leaves no page behind either
    try:
        write_text_atomically(output, page)
    except BaseException:  # no staged figure is left behind, whatever stopped the page
        _unstage(staged)
        raise
    try:
        for tmp, final in staged[0]:
            tmp.replace(final)
    except OSError as exc:  # the page is written: what was not put in place is not left staged either
        _unstage(staged)
        raise ReportError(f"cannot write {exc.filename}: {exc.strerror}") from None
    _say(f"report written to {output} ({size_text(len(page.encode()))})")
    if not export.get("series"):
        _say(
            f"warning: {args.export} has no series block: the report has tables but no figures"
            f" (export the run with {_again(export)})"
        )
    for folder, fmt, images in made:
        _say(f"{len(images)} {fmt.upper()} figure(s) written to {folder}")
    return 0


Staged = tuple[list[tuple[Path, Path]], list[Path]]


def _stage_figures(made: list[tuple[Path, str, list[tuple[str, bytes]]]]) -> Staged:
    """Every figure written beside its name (renamed into place once the page is written too), and the
    folders made for them; nothing of either is left when one fails (a full disk, a name that is a
    folder): one line."""
    staged: Staged = ([], [])
    try:
        for folder, _fmt, images in made:
            if not folder.is_dir():
                folder.mkdir()
                staged[1].append(folder)
            for name, data in images:
                final = through_link(folder / name)  # a figure that is a link: where it points, as -o
                if final.is_dir():
                    raise IsADirectoryError(errno.EISDIR, "it is a folder", str(final))
                tmp = final.with_name(f".{name}.sparkwatch-tmp")
                staged[0].append((tmp, final))
                try:
                    tmp.write_bytes(data)
                except OSError as exc:  # named as the figure asked for, not its staging name
                    raise OSError(exc.errno, exc.strerror, str(final)) from None
    except OSError as exc:
        _unstage(staged)
        raise ReportError(f"cannot write {exc.filename or 'a figure'}: {exc.strerror or exc}") from None
    return staged


def _unstage(staged: Staged) -> None:
    """Every staged figure not yet in place, and the folders made for them (emptied: removed)."""
    for tmp, _final in staged[0]:
        tmp.unlink(missing_ok=True)
    for folder in staged[1]:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _figures(export: dict[str, Any], fmt: str) -> list[tuple[str, bytes]]:
    from sparkwatch.report.static import images  # noqa: PLC0415 — vl-convert, on demand

    return images(export, "png" if fmt == "png" else "svg")


def _say(line: str) -> None:
    print(f"sparkwatch: {line}", file=sys.stderr)


def _again(export: dict[str, Any]) -> str:
    """The commands that export the run again with its series block, quoted for a line of text."""
    return " or ".join(f"`{command}`" for command in series_commands(export))
