"""The coordinator's API in-process (aiohttp TestServer on port 0, a real SQLite file under tmp), driven
from synchronous hypothesis tests through one event loop, with every request under a timeout; and the
properties every answer must have."""

from __future__ import annotations

import asyncio
import json
import pathlib
import sqlite3
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp.test_utils import TestClient, TestServer

from fuzz.profiles import CASE_TIMEOUT_S
from sparkwatch.coordinator.api.app import make_app
from sparkwatch.coordinator.service import Coordinator
from sparkwatch.store import Store

TOKEN = "fuzz-token-0123456789abcdef"

#: Everything a request could write, as digests cheap enough to take before and after every request (the
#: tables grow over a nightly run): per table the row count, the highest rowid and sums over the columns a
#: request sets, so a row added, dropped or rewritten changes one of them.
_STATE_QUERIES = (
    "SELECT COUNT(*), MAX(rowid), COUNT(t_end_ns), TOTAL(t_end_ns), TOTAL(length(command)),"
    " TOTAL(length(name)) FROM runs",
    "SELECT COUNT(*), MAX(rowid), TOTAL(committed), TOTAL(t_touched_ns) FROM imports",
    "SELECT COUNT(*), MAX(rowid), TOTAL(t_begin_ns), TOTAL(length(name)), TOTAL(length(phase)) FROM marks",
    "SELECT COUNT(*), MAX(rowid), COUNT(import_id), TOTAL(t_start_ns), TOTAL(t_end_ns), TOTAL(length(id)),"
    " TOTAL(length(source)), TOTAL(length(phase)) FROM windows",
)


@dataclass(frozen=True, slots=True)
class Answer:
    method: str
    path: str
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def __str__(self) -> str:
        return f"{self.method} {self.path} -> {self.status} {self.content_type} {self.body[:300]!r}"


def segment(value: str) -> str:
    """A path segment that carries ``value`` (any text) to the route's match_info."""
    return quote(value, safe="")


class CoordinatorApi:
    """One coordinator (no nodes) behind a real in-process HTTP server; ``call`` sends one request."""

    def __init__(self, db: pathlib.Path, token: str | None = None) -> None:
        self.db = db
        self.token = token
        self.store = Store(db)
        self.coordinator = Coordinator([], self.store)
        self.loop = asyncio.Runner()
        self.client = self.loop.run(self._start())
        self._reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)

    async def _start(self) -> TestClient[Any, Any]:
        client = TestClient(TestServer(make_app(self.coordinator, self.token)))
        await client.start_server()
        return client

    def close(self) -> None:
        self._reader.close()
        self.loop.run(self.coordinator.stop())
        self.loop.run(self.client.close())
        self.loop.close()
        self.store.close()

    def call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> Answer:
        """One request, with the bearer token if ``auth`` (``headers`` may replace it); a hang fails the
        case."""
        sent = {"Authorization": f"Bearer {self.token}"} if self.token and auth else {}
        sent.update(headers or {})
        return self.loop.run(self._call(method, path, body, sent))

    async def _call(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        try:
            async with asyncio.timeout(CASE_TIMEOUT_S):
                response = await self.client.request(method, path, data=body, headers=headers)
                data = await response.read()
        except TimeoutError:
            raise AssertionError(f"hang: {method} {path} took over {CASE_TIMEOUT_S} s") from None
        return Answer(method, path, response.status, response.content_type, data)

    def raw(self, head: bytes) -> Answer:
        """A request written byte for byte (request line and headers as given), for paths no client
        library would send; the status line is parsed by hand."""
        return self.loop.run(self._raw(head))

    async def _raw(self, head: bytes) -> Answer:
        server = self.client.server
        try:
            async with asyncio.timeout(CASE_TIMEOUT_S):
                reader, writer = await asyncio.open_connection(server.host, server.port)
                writer.write(head)
                await writer.drain()
                data = await reader.read()
                writer.close()
        except TimeoutError:
            raise AssertionError(f"hang: raw request {head[:200]!r}") from None
        status_line, _, rest = data.partition(b"\r\n")
        headers, _, body = rest.partition(b"\r\n\r\n")
        parts = status_line.split(b" ")
        assert len(parts) >= 2 and parts[1].isdigit(), f"no HTTP answer to {head[:200]!r}: {data[:300]!r}"
        kind = b""
        for line in headers.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-type":
                kind = value.split(b";")[0].strip()
        return Answer("RAW", repr(head[:120]), int(parts[1]), kind.decode("latin-1"), body)

    def state(self) -> tuple[tuple[Any, ...], ...]:
        """What the database holds that any request could change (committed writes: every request has
        finished writing before it is answered)."""
        return tuple(self._reader.execute(query).fetchone() for query in _STATE_QUERIES)

    def windows_stored(self) -> int:
        return int(self._reader.execute("SELECT COUNT(*) FROM windows").fetchone()[0])

    def window_count(self, run_id: str) -> int:
        answer = self.call("GET", f"/v1/runs/{segment(run_id)}")
        assert answer.status == 200, str(answer)
        count = answer.json()["windows"]
        assert isinstance(count, int)
        return count


#: aiohttp's HTTP parser refuses a request line longer than this with a plain-text 400 before any handler
#: (docs/reliability.md, *What is not promised*).
MAX_REQUEST_LINE = 8190


def check_answer(answer: Answer) -> None:
    """What every answer must be: no 5xx but the documented 503s, and a 4xx is JSON with its reason."""
    assert answer.status < 500 or _documented_503(answer), f"server error: {answer}"
    if len(f"{answer.method} {answer.path} HTTP/1.1") > MAX_REQUEST_LINE:
        assert answer.status == 400, f"an overlong request line not refused: {answer}"
    elif 400 <= answer.status < 500:
        check_refusal(answer)


def check_refusal(answer: Answer) -> None:
    assert answer.content_type == "application/json", f"a refusal that is not JSON: {answer}"
    body = answer.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], str(answer)
    assert body.get("reason") not in (None, "", []), f"a refusal without a reason: {answer}"


def _documented_503(answer: Answer) -> bool:
    """/healthz answers 503 with the disconnected nodes; nothing else may (the disk is never full here)."""
    return answer.status == 503 and answer.path == "/healthz"


def check_export(api: CoordinatorApi, run_id: str) -> dict[str, Any]:
    answer = api.call("GET", f"/v1/runs/{segment(run_id)}/export")
    assert answer.status == 200, f"the export stopped answering: {answer}"
    body = answer.json()
    assert isinstance(body, dict) and body["run"]["id"] == run_id, str(answer)
    return body
