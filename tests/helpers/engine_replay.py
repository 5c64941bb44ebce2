"""A loopback serving engine's ``/metrics``: a recorded vLLM or SGLang page (tests/fixtures/engines) with
its values scripted per scrape, served by a real aiohttp server; each page served is logged with its time."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "engines"
VLLM = "vllm_v1_openshift_ai.txt"
SGLANG = "sglang_production_metrics.txt"
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)\s*$")


def capture(name: str) -> str:
    return (FIXTURES / name).read_text()


def with_values(text: str, values: Mapping[str, float]) -> str:
    """The page with every sample of each named series set to its value; a name the page lacks is added,
    labelled like the page's first sample (a counter when it ends in ``_total``)."""
    seen: set[str] = set()
    first_labels = ""
    out = []
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if found:
            first_labels = first_labels or (found["labels"] or "")
            if found["name"] in values:
                seen.add(found["name"])
                out.append(f"{found['name']}{found['labels'] or ''} {float(values[found['name']])!r}")
                continue
        out.append(line)
    for name in values:
        if name not in seen:
            kind = "counter" if name.endswith("_total") else "gauge"
            out += [f"# TYPE {name} {kind}", f"{name}{first_labels} {float(values[name])!r}"]
    return "\n".join(out) + "\n"


def add_series(text: str, name: str, labels: Mapping[str, str], value: float) -> str:
    """One more sample of ``name`` with these labels, after the page's samples of it (another DP rank)."""
    shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
    lines = text.splitlines()
    last = max(
        (i for i, line in enumerate(lines) if line.startswith((f"{name}{{", f"{name} "))), default=None
    )
    extra = f"{name}{{{shown}}} {float(value)!r}"
    if last is None:
        kind = "counter" if name.endswith("_total") else "gauge"
        return text.rstrip("\n") + f"\n# TYPE {name} {kind}\n{extra}\n"
    return "\n".join([*lines[: last + 1], extra, *lines[last + 1 :]]) + "\n"


@dataclass
class EngineReplay:
    """``script(elapsed_s)`` gives the page of each scrape; ``status`` other than 200 answers that instead;
    ``served`` logs (time.time_ns(), page) of each page given."""

    script: Callable[[float], str]
    token: str | None = None
    status: int = 200
    served: list[tuple[int, str]] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def app(self) -> web.Application:
        async def metrics(request: web.Request) -> web.Response:
            if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
                return web.Response(status=401, text="Unauthorized")
            if self.status != 200:
                return web.Response(status=self.status, text="engine busy")
            page = self.script(time.monotonic() - self.t0)
            self.served.append((time.time_ns(), page))
            return web.Response(text=page, content_type="text/plain", charset="utf-8")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app
