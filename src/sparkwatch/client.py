"""A small async client for the coordinator API, shared by `run`, `import`, `proxy`, `hardware` and the demo.

Every failure is a :class:`CoordinatorError` whose text is one line: the URL and the coordinator's JSON
reason (or the connection error), so a CLI can print it as it is.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from yarl import URL

from sparkwatch.client_bodies import bodies_ahead, request_json
from sparkwatch.client_waits import NodeWaits
from sparkwatch.defaults import (
    DEFAULT_COORDINATOR,
    DEFAULT_GATE_THRESHOLD,
    DEFAULT_INTERVAL_S,
    DEFAULT_SCOPE,
    ENV_COORDINATOR,
    ENV_TOKEN_FILE,
    EXPORT_SCHEMA,
)
from sparkwatch.http_reasons import refusal_code, refusal_reason, unreachable_reason
from sparkwatch.wire import FrameError, TimeFrame, time_reply
from sparkwatch_agent.shared.auth import ServerToken, TokenFile, bearer_headers, load_token
from sparkwatch_agent.shared.http import COORDINATOR_SERVER, other_service
from sparkwatch_agent.shared.strict_text import cut_short

if TYPE_CHECKING:  # a type only: the core's numpy is not what a client call needs to start
    from sparkwatch.core.windows import Window

log = logging.getLogger(__name__)

WINDOWS_PER_POST = 10_000


#: The keys of a run the CLI reads, and their types.
LISTED_SHAPE: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "name": str,
    "open": bool,
    "t_start_ns": int,
    "t_end_ns": (int, type(None)),
}
OPENED_SHAPE = {**LISTED_SHAPE, "interval_s": (int, float)}
RUN_SHAPE = {
    **OPENED_SHAPE,
    "gate_threshold": (int, float),
    "scope": str,
    "windows": int,
}
MARK_SHAPE: dict[str, type | tuple[type, ...]] = {"name": str}
ENDED_MARK_SHAPE = {**MARK_SHAPE, "t_start_ns": int, "t_end_ns": int}
NODE_SHAPE: dict[str, type | tuple[type, ...]] = {"node": str, "connected": bool}


def _run_path(run_id: str) -> str:
    """``/v1/runs/{id}`` with the id as one path segment: a ``/``, ``?`` or ``#`` in it is the id's, not the
    URL's (``..`` would climb out: no run has that id)."""
    if run_id in ("", ".", ".."):
        raise CoordinatorError(f"no run {run_id!r}: not a run id", 404, "not_found")
    return f"/v1/runs/{urllib.parse.quote(run_id, safe='')}"


class CoordinatorError(Exception):
    """The coordinator could not be reached or refused a request (``status``: its HTTP status, if any;
    ``code``: the ``error`` word of its JSON answer, e.g. ``duplicate_window_ids`` or ``run_ended``)."""

    def __init__(
        self, message: str, status: int | None = None, code: str | None = None, t_end_ns: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.t_end_ns = t_end_ns  # a ``run_ended`` refusal's: where the run ended

    @property
    def refused(self) -> bool:
        """A 4xx: sending the same request again cannot succeed."""
        return self.status is not None and 400 <= self.status < 500


@dataclass(frozen=True, slots=True)
class Imported:
    """An import the coordinator committed: how many windows, and its note when some of the file's
    repeated the proxy's requests (those were left out)."""

    count: int
    note: str | None


@dataclass(frozen=True, slots=True)
class CoordinatorTarget:
    """Where the coordinator is and how to authenticate (from flags, else the environment)."""

    url: str
    token: str | None
    #: Where ``token`` was read (a flag or $SPARKWATCH_TOKEN_FILE), for a 401 to name; None: given as is.
    token_file: Path | None = None
    #: What its messages call it where its URL means nothing to the user (a command's own coordinator, on a
    #: loopback port of the moment); None: its URL.
    label: str | None = None
    #: Whether the command could start its own coordinator instead (`run`, `nodes check`, `hardware` with
    #: --nodes): what a refused connection suggests, and only there.
    embeds: bool = False

    @classmethod
    def resolve(
        cls,
        url: str | None,
        token_file: Path | None,
        environ: Mapping[str, str] | None = None,
        *,
        embeds: bool = False,
    ) -> CoordinatorTarget:
        env = os.environ if environ is None else environ
        chosen = (url or env.get(ENV_COORDINATOR) or DEFAULT_COORDINATOR).rstrip("/")
        if not chosen.startswith(("http://", "https://")):
            raise CoordinatorError(f"coordinator URL must start with http:// or https://: {chosen!r}")
        parts = urllib.parse.urlsplit(chosen)
        if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
            raise CoordinatorError(  # never echoed: what is there may be a secret
                "coordinator URL must not carry credentials, a query or a fragment: give the token with"
                f" --token-file (or ${ENV_TOKEN_FILE})"
            )
        if parts.path.endswith(("/v1", "/api/v1")):  # the API's routes are below the base: /v1/v1/runs
            raise CoordinatorError(f"coordinator URL is its base, without {parts.path}: {chosen!r}")
        path = token_file_of(token_file, env)
        token = load_token(path) if path else None
        return cls(chosen, token, path, embeds=embeds)


def token_file_of(flag: Path | None, environ: Mapping[str, str] | None = None) -> Path | None:
    """The coordinator's token file a command reads: ``--token-file``, else ``$SPARKWATCH_TOKEN_FILE``."""
    env = os.environ if environ is None else environ
    return flag or (Path(env[ENV_TOKEN_FILE]) if env.get(ENV_TOKEN_FILE) else None)


def token_file_read(flag: Path | None, environ: Mapping[str, str] | None = None) -> dict[Path, str]:
    """The token file as an output's ``reads`` (outputs.check_output): ``-o`` may not replace it, however
    it was named (before, ``$SPARKWATCH_TOKEN_FILE`` was not looked at, and the export replaced the token)."""
    path = token_file_of(flag, environ)
    named = "--token-file" if flag is not None else f"${ENV_TOKEN_FILE}"
    return {} if path is None else {path.resolve(): f"the coordinator's token file ({named})"}


def not_running_hint(embeds: bool) -> str:
    """What a refused connection to the coordinator adds: nothing listens there, and what a user may mean
    (where the command can start its own instead, that)."""
    instead = "; or let this command start its own: --nodes nodes.toml" if embeds else ""
    return (
        f" (is `sparkwatch coordinator` running there? its URL: --coordinator or ${ENV_COORDINATOR}{instead})"
    )


class CoordinatorClient(NodeWaits):
    """One aiohttp session to one coordinator; use as ``async with CoordinatorClient(target) as c``."""

    def __init__(self, target: CoordinatorTarget, timeout_s: float = 30.0) -> None:
        self.target = target
        # a token from a file is the file's at each request: a long `run` outlives a rotated token
        self._token: ServerToken | None = target.token
        if target.token_file and target.token:
            self._token = TokenFile(target.token_file, target.token, logger=log)
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s), json_serialize=request_json
        )

    async def __aenter__(self) -> CoordinatorClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._session.close()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.target.url}{path}"
        where = f"{method} {path} on {self.target.label}" if self.target.label else f"{method} {url}"
        try:
            auth = bearer_headers(self._token)
            # a redirect is not followed: aiohttp would drop the token on another host (a 401 then blamed the
            # token file) or send a POST's body there
            async with self._session.request(
                method, url, json=body, headers=auth, allow_redirects=False
            ) as resp:
                text = await resp.text()
                if 300 <= resp.status < 400:
                    said = _redirect(url, path, resp.headers.get("Location"))
                    raise CoordinatorError(f"{where}: HTTP {resp.status}, {said}", resp.status)
                if resp.status >= 400:
                    code, end = refusal_code(text)  # a coordinator refuses with a code: else not one
                    service = other_service(resp.headers, COORDINATOR_SERVER)
                    hint = self._hint(resp.status, code, service)
                    # aiohttp's own plain refusals begin with their status: "404: Not Found"
                    reason = refusal_reason(text).removeprefix(f"{resp.status}: ")
                    if service is not None and resp.status == 401:  # its token, not the coordinator's
                        reason = f"refused by the {service}"
                    message = f"{where}: HTTP {resp.status}: {reason}{hint}"
                    raise CoordinatorError(message, resp.status, code, end)
                try:
                    return json.loads(text) if text else None
                except ValueError:
                    raise CoordinatorError(f"{where}: the answer is not JSON") from None
                except RecursionError:  # no coordinator's: it was a traceback
                    raise CoordinatorError(f"{where}: the answer is JSON nested too deep to read") from None
        except aiohttp.ClientError as exc:
            refused = (
                isinstance(exc, aiohttp.ClientConnectorError) and exc.os_error.errno == errno.ECONNREFUSED
            )
            raise CoordinatorError(
                f"cannot reach the coordinator at {self.target.url}: {unreachable_reason(exc)}"
                + (not_running_hint(self.target.embeds) if refused else "")
            ) from None
        except TimeoutError:
            raise CoordinatorError(f"{where}: no answer in time") from None
        except ValueError as exc:  # aiohttp's own refusal of what would be sent (a header, a URL)
            raise CoordinatorError(f"{where}: cannot be sent: {exc}") from None

    def _hint(self, status: int, code: str | None, service: str | None) -> str:
        """What a refusal's line adds: which other sparkwatch service answered (an agent's port given as
        the coordinator's), or that a refusal without a coordinator's JSON reason came from another
        service; for a 401, where a token is given, or which file the refused one came from."""
        if service is not None:
            return (
                f" ({self.target.url} is a {service}, not the coordinator: the coordinator listens on"
                f" {DEFAULT_COORDINATOR.rsplit(':', 1)[1]} unless its --listen says otherwise)"
            )
        if not code:
            return f" (no coordinator's JSON reason: is {self.target.url} another service?)"
        if status == 401 and self.target.token is None:
            return f" (no token was sent: give --token-file, or set ${ENV_TOKEN_FILE})"
        if status == 401 and self.target.token_file is not None:
            return (
                f" (the token sent is the one in {self.target.token_file}: give the file the coordinator's"
                " --token-file reads)"
            )
        return ""

    async def create_run(
        self,
        name: str,
        interval_s: float = DEFAULT_INTERVAL_S,
        scope: str = DEFAULT_SCOPE,
        gate_threshold: float = DEFAULT_GATE_THRESHOLD,
        phases: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Open a run; ``phases`` (the window phases it measures) is sent only when given, so a coordinator
        that predates them still takes a run that names none (the API's default is ``["timed"]``)."""
        body: dict[str, Any] = {
            "name": name,
            "interval_s": interval_s,
            "scope": scope,
            "gate_threshold": gate_threshold,
        }
        if phases is not None:
            body["phases"] = list(phases)
        return self._shaped(await self._call("POST", "/v1/runs", body), OPENED_SHAPE, "POST /v1/runs")

    async def run(self, run_id: str) -> dict[str, Any]:
        path = _run_path(run_id)
        return self._shaped(await self._call("GET", path), RUN_SHAPE, f"GET {path}")

    async def runs(self) -> dict[str, Any]:
        """``GET /v1/runs`` as it answers: ``{"runs": [...]}``, oldest first."""
        answer = self._shaped(await self._call("GET", "/v1/runs"), {"runs": list}, "GET /v1/runs")
        for run in answer["runs"]:
            self._shaped(run, LISTED_SHAPE, "GET /v1/runs")
        return answer

    def _shaped(self, answer: Any, shape: Mapping[str, type | tuple[type, ...]], what: str) -> dict[str, Any]:
        """``answer`` when it has the keys the CLI reads, of their types; else one line: the URL may name
        some other service that answers JSON."""
        if not isinstance(answer, dict):
            raise CoordinatorError(f"{what} at {self.target.url}: not a sparkwatch coordinator's answer")
        for key, kind in shape.items():
            value = answer.get(key)
            if key not in answer or not isinstance(value, kind) or isinstance(value, bool) != (kind is bool):
                raise CoordinatorError(
                    f"{what} at {self.target.url}: not a sparkwatch coordinator's answer ({key!r} missing or"
                    " of another type)"
                )
        return answer

    async def mark(
        self, run_id: str, name: str, event: str, phase: str | None = None, age_ns: int | None = None
    ) -> dict[str, Any]:
        """Begin (``event="begin"``, in ``phase``; the API's default is ``timed``) or end a mark now (or an
        end ``age_ns`` before the request arrives)."""
        body: dict[str, Any] = {"name": name, "event": event}
        body |= {k: v for k, v in (("phase", phase), ("age_ns", age_ns)) if v is not None}
        path = _run_path(run_id) + "/marks"
        shape = MARK_SHAPE if event == "begin" else ENDED_MARK_SHAPE
        return self._shaped(await self._call("POST", path, body), shape, f"POST {path}")

    async def end_run(self, run_id: str, command: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"command": command} if command is not None else {}
        path = _run_path(run_id) + "/end"
        return self._shaped(await self._call("POST", path, body), LISTED_SHAPE, f"POST {path}")

    async def delete_run(self, run_id: str) -> dict[str, Any]:
        """Delete an ended (or damaged) run: ``{"deleted": id, "windows": N}``; an open one is a 409."""
        path = _run_path(run_id)
        return self._shaped(
            await self._call("DELETE", path), {"deleted": str, "windows": int}, f"DELETE {path}"
        )

    async def add_windows(self, run_id: str, windows: Sequence[Window]) -> int:
        """Posts in batches; each batch is all-or-nothing on the coordinator."""
        stored = 0
        for i in range(0, len(windows), WINDOWS_PER_POST):
            batch = [w.to_body() for w in windows[i : i + WINDOWS_PER_POST]]
            path = _run_path(run_id) + "/windows"
            result = self._shaped(
                await self._call("POST", path, {"windows": batch}), {"stored": int}, f"POST {path}"
            )
            stored += int(result["stored"])
        return stored

    async def import_windows(self, run_id: str, windows: Iterable[Window]) -> Imported:
        """Every window in one import (``WINDOWS_PER_POST`` per request, read from ``windows`` as they are
        posted), committed at the end: the run gets all of them or, when anything fails on the way (a bad
        line late in a file, a refusal, Ctrl-C), none. The coordinator refuses an import that mostly
        repeats the proxy's requests, and leaves out the windows of one that partly does, with a note
        (core/repeated_windows.py)."""
        path = _run_path(run_id) + "/imports"
        begun = self._shaped(await self._call("POST", path, {}), {"import_id": str}, f"POST {path}")
        import_id = str(begun["import_id"])
        try:
            async with contextlib.aclosing(bodies_ahead(windows, WINDOWS_PER_POST)) as bodies:
                async for batch in bodies:
                    body = {"windows": batch, "import_id": import_id}
                    await self._call("POST", _run_path(run_id) + "/windows", body)
            path = _run_path(run_id) + f"/imports/{import_id}/commit"
            done = self._shaped(await self._call("POST", path, {}), {"committed": int}, f"POST {path}")
        except BaseException:
            with contextlib.suppress(CoordinatorError):  # else the coordinator drops it after a while
                await self._call("DELETE", _run_path(run_id) + f"/imports/{import_id}")
            raise
        note = done.get("note")
        return Imported(int(done["committed"]), note if isinstance(note, str) else None)

    async def export(self, run_id: str, series_buckets: int | None = None) -> dict[str, Any]:
        """The run's export; with ``series_buckets``, its ``series`` block in that many time buckets."""
        query = "" if series_buckets is None else f"?series_buckets={series_buckets}"
        answer = await self._call("GET", _run_path(run_id) + f"/export{query}")
        if not isinstance(answer, dict) or answer.get("schema") != EXPORT_SCHEMA:
            raise CoordinatorError(
                f"GET {_run_path(run_id)}/export at {self.target.url}: not a {EXPORT_SCHEMA} export"
            )
        return answer

    async def run_windows(self, run_id: str) -> Any:
        """The run as stored and its windows, none measured (``importers.windows_answer`` reads it)."""
        return await self._call("GET", _run_path(run_id) + "/windows")

    async def time(self) -> TimeFrame:
        """The coordinator's clocks now (``GET /v1/time``)."""
        try:
            return time_reply(await self._call("GET", "/v1/time"))
        except FrameError as exc:
            raise CoordinatorError(f"GET {self.target.url}/v1/time: {exc}") from None

    async def nodes(self) -> list[dict[str, Any]]:
        return (await self.nodes_and_engine())[0]

    async def nodes_and_engine(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """/v1/nodes: the nodes, and the serving engine's scraper (None: the coordinator scrapes none)."""
        answer = self._shaped(await self._call("GET", "/v1/nodes"), {"nodes": list}, "GET /v1/nodes")
        engine = answer.get("engine")
        nodes = [self._shaped(node, NODE_SHAPE, "GET /v1/nodes") for node in answer["nodes"]]
        return nodes, engine if isinstance(engine, dict) else None


def _redirect(url: str, path: str, location: str | None) -> str:
    """A redirect, said: where it points (resolved against the request) and, where it keeps the API's path,
    the base URL it moves the coordinator to (what ``--coordinator`` takes: an http:// one moved to https)."""
    if not location:
        return "a redirect that says nowhere: not followed"
    target = str(URL(url).join(URL(location)))
    route, moved = path.partition("?")[0], target.partition("?")[0]
    base = moved.removesuffix(route) if moved.endswith(route) else None
    hint = f": if that is the coordinator, give --coordinator {base}" if base else ""
    return (
        f"a redirect to {cut_short(target, 120)}: not followed (the token goes to the coordinator's URL"
        f" alone){hint}"
    )
