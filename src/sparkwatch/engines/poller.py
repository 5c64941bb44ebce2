"""Scrape the serving engine's ``/metrics`` on the coordinator's clock and store what it said, or why it
said nothing.

Like a wall meter (meters/poller.py): a scrape is stamped at the middle of its request, so engine samples
sit on the same clock as the windows; a scrape that fails or times out stores its reason and no values, so
the export sees a gap there, never the last good value carried over."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from yarl import URL

from sparkwatch.engines.scrape import ScrapeError, read_page
from sparkwatch.engines.spec import EngineSpec
from sparkwatch.http_reasons import failure_line
from sparkwatch.http_redirects import get_on_host
from sparkwatch.meters.credentials import SecretFileError, first_line
from sparkwatch.store.engine_samples import EngineRow
from sparkwatch.store.tx import stored_or_why
from sparkwatch_agent.shared.backoff import every

log = logging.getLogger(__name__)

#: A scrape slower than this many intervals (at least this many seconds) is a failed one.
TIMEOUT_INTERVALS, MIN_TIMEOUT_S = 2.0, 2.0
#: A page larger than this is not an engine's metrics (vLLM's is ~100 KB with every histogram bucket).
MAX_PAGE_BYTES = 8 * 1024 * 1024


class EngineSink(Protocol):
    def add_engine_sample(self, row: EngineRow, uncertainty_ns: int) -> None: ...

    def add_engine_error(self, t_ns: int, error: str) -> None: ...


@dataclass(slots=True)
class EngineState:
    """What ``GET /v1/nodes`` shows of the engine scraper (its ``engine`` field)."""

    url: str
    interval_s: float
    scrapes: int = 0
    failures: int = 0
    family: str | None = None
    last_t_ns: int | None = None
    error: str | None = None  # the latest failure, until a scrape succeeds

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "interval_s": self.interval_s,
            "scrapes": self.scrapes,
            "failures": self.failures,
            "family": self.family,
            "last_t_ns": self.last_t_ns,
            "error": self.error,
        }


class EnginePoller:
    def __init__(
        self,
        spec: EngineSpec,
        sink: EngineSink,
        *,
        now_ns: Callable[[], int] = time.time_ns,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self._sink = sink
        self._now_ns = now_ns
        self._monotonic = monotonic
        self.state = EngineState(spec.url, spec.interval_s)
        self._refused: tuple[str, ...] = ()  # the series the latest scrape left out as out of bounds

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Scrape every ``interval_s`` on an absolute schedule (a slow scrape skips, never bunches) until
        cancelled."""
        await every(self.spec.interval_s, self._monotonic, lambda: self.scrape_once(session))

    async def scrape_once(self, session: aiohttp.ClientSession) -> None:
        t0 = self._now_ns()
        try:
            async with asyncio.timeout(max(MIN_TIMEOUT_S, TIMEOUT_INTERVALS * self.spec.interval_s)):
                text = await self._page(session)
            t1 = self._now_ns()  # the page as it was: parsing is not part of the reading's time
            scrape = await asyncio.to_thread(read_page, text)  # ~40 ms for 100 KB: off the event loop
        except TimeoutError:
            self._failed(t0, "no answer within the timeout")
            return
        except ScrapeError as exc:
            self._failed(t0, str(exc))
            return
        except (aiohttp.ClientError, OSError, UnicodeDecodeError, ValueError, ArithmeticError) as exc:
            # ArithmeticError: an OverflowError in combining a page's values would otherwise end the task
            self._failed(t0, f"{type(exc).__name__}: {exc}")
            return
        # a bug on a page it did not expect: a failed scrape, its trace logged once (while the error stays
        # the same), never the end of scraping: nothing watches the task
        except Exception as exc:
            error = failure_line(f"{type(exc).__name__}: {exc}")
            if error != self.state.error:
                log.exception("engine metrics at %s: scrape failed", self.spec.url)
            self._failed(t0, error, logged=True)
            return
        row = EngineRow(
            (t0 + t1) // 2, scrape.family, self.spec.interval_s, scrape.values, scrape.sources, scrape.unknown
        )
        if (why := stored_or_why(lambda: self._sink.add_engine_sample(row, (t1 - t0) // 2))) is not None:
            self._failed(t0, f"scraped, not stored: {why}")
            return
        if self.state.error is not None:
            log.info("engine metrics at %s answer again", self.spec.url)
        if scrape.family is None and (self.state.family is not None or self.state.last_t_ns is None):
            log.warning("engine metrics at %s: no vLLM or SGLang series; raw names kept", self.spec.url)
        self._report_refused(scrape.refused)
        self.state.scrapes += 1
        self.state.family, self.state.last_t_ns, self.state.error = scrape.family, (t0 + t1) // 2, None

    async def _page(self, session: aiohttp.ClientSession) -> str:
        headers = {"Accept": "text/plain"}
        if self.spec.bearer_token_file is not None:
            headers["Authorization"] = f"Bearer {_token(self.spec.bearer_token_file)}"
        # a redirect elsewhere is refused (http_redirects): the token dropped there, that host's page stored
        async with get_on_host(
            session, URL(self.spec.url), "the engine", ScrapeError, headers=headers
        ) as response:
            if response.status != 200:
                raise ScrapeError(
                    f"the engine answered HTTP {response.status} {response.reason or ''}".strip()
                )
            body = await response.content.read(MAX_PAGE_BYTES + 1)
        if len(body) > MAX_PAGE_BYTES:
            raise ScrapeError(f"the page is larger than {MAX_PAGE_BYTES} bytes: not an engine's metrics")
        return body.decode("utf-8")

    def _report_refused(self, refused: Mapping[str, float]) -> None:
        """Values out of bounds (scrape.py) are warned of as a failed scrape is, once while the same series
        carry them, not at every scrape; the rest of the scrape is stored as usual, and no failure counted."""
        names = tuple(sorted(refused))
        if names and names != self._refused:
            shown = ", ".join(f"{name} {refused[name]!r}" for name in names)
            log.warning("engine metrics at %s: values out of bounds left out: %s", self.spec.url, shown[:300])
        elif self._refused and not names:
            log.info("engine metrics at %s: every value within bounds again", self.spec.url)
        self._refused = names

    def _failed(self, t_ns: int, error: str, *, logged: bool = False) -> None:
        """A scrape without values: counted, stored as the gap's reason, logged when it is new (unless
        ``logged`` already, with its trace)."""
        error = failure_line(error)
        if error != self.state.error and not logged:
            log.warning("engine metrics at %s: %s", self.spec.url, error)
        self.state.scrapes += 1
        self.state.failures += 1
        self.state.error = error
        stored_or_why(lambda: self._sink.add_engine_error(t_ns, error))  # else without its reason, said above


def _token(path: Path) -> str:
    """The engine's bearer token; a ScrapeError naming the file (never its contents) when unusable."""
    try:
        return first_line(path, "the engine's token", in_header=True)
    except SecretFileError as exc:
        raise ScrapeError(str(exc)) from None
