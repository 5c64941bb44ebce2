"""What the report page inlines besides its data: the Vega, Vega-Lite and vega-embed bundle that vl-convert
assembles, and the page's own script and style (package data in ``assets/``).

The bundle (900 kB) takes vl-convert 1.5 s to assemble and is the same for one vl-convert version, so it is
kept in the user's cache folder (``$XDG_CACHE_HOME/sparkwatch``, else ``~/.cache/sparkwatch``) named by
that version: every `sparkwatch run` writes a report, and only the first pays. A cache that cannot be
read or written is simply not used. Light to import: the coordinator holds one ``Assets`` from its start."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path

from sparkwatch.outputs import write_text_atomically

#: The cached bundle must end with what the default snippet defines (a cut-off file is not used).
BUNDLE_END = "window.vegaLite=__default1;"


def default_cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "sparkwatch"


def vl_convert_bundle() -> tuple[str, str]:
    """vl-convert's version and its bundle with the default snippet (window.vegaEmbed, vega, vegaLite)."""
    import vl_convert  # noqa: PLC0415 — only for those who build a report

    # None: the default snippet; the stub omits that runtime default
    return vl_convert_version(), vl_convert.javascript_bundle(None)  # type: ignore[arg-type]


def vl_convert_version() -> str:
    """The installed vl-convert-python's version (post releases included): the cache file's name."""
    return metadata.version("vl-convert-python")


@dataclass
class Assets:
    """The inlined scripts, made once per process (and the bundle once per vl-convert version on disk)."""

    cache_dir: Path | None = field(default_factory=default_cache_dir)
    make_bundle: Callable[[], tuple[str, str]] = vl_convert_bundle
    version: Callable[[], str] = vl_convert_version
    _bundle: str | None = field(default=None, repr=False)
    _making: threading.Lock = field(default_factory=threading.Lock, repr=False)  # two first reports at once

    def vega_bundle(self) -> str:
        with self._making:
            if self._bundle is None:
                self._bundle = self._cached() or self._made()
            return self._bundle

    def _path(self) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / f"vega-bundle-{self.version()}.js"

    def _cached(self) -> str | None:
        path = self._path()
        try:
            text = path.read_text(encoding="utf-8") if path is not None else None
        except (OSError, UnicodeDecodeError):
            return None
        return text if text and text.rstrip().endswith(BUNDLE_END) else None

    def _made(self) -> str:
        version, bundle = self.make_bundle()
        path = self.cache_dir / f"vega-bundle-{version}.js" if self.cache_dir is not None else None
        if path is not None and bundle.rstrip().endswith(BUNDLE_END):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomically(path, bundle)
            except OSError:
                pass  # no cache: the next report makes it again
        return bundle

    @staticmethod
    def text(name: str) -> str:
        return resources.files("sparkwatch.report").joinpath("assets", name).read_text(encoding="utf-8")
