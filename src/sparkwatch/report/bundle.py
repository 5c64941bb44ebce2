"""What the report page inlines besides its data: the Vega, Vega-Lite and vega-embed bundle that vl-convert
assembles (900 kB, a second or two to make, so made once per process that builds reports), and the page's
own script and style (package data in ``assets/``). Light to import: the coordinator holds one at start."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from importlib import resources


@dataclass
class Assets:
    """The inlined scripts, read once per process that builds reports (the vl-convert bundle takes a
    second or two to assemble)."""

    _bundle: str | None = field(default=None, repr=False)
    _making: threading.Lock = field(default_factory=threading.Lock, repr=False)  # two first reports at once

    def vega_bundle(self) -> str:
        with self._making:
            if self._bundle is None:
                import vl_convert  # noqa: PLC0415 — a second of start-up only for those who build a report

                # None: the default snippet (window.vegaEmbed, vega, vegaLite); the stub omits that default
                self._bundle = vl_convert.javascript_bundle(None)  # type: ignore[arg-type]
            return self._bundle

    @staticmethod
    def text(name: str) -> str:
        return resources.files("sparkwatch.report").joinpath("assets", name).read_text(encoding="utf-8")
