"""A small async client for the coordinator API, shared by `run`, `import`, `proxy`, `hardware` and the demo.

Every failure is a :class:`CoordinatorError` whose text is one line: the URL and the coordinator's JSON
reason (or the connection error), so a CLI can print it as it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from sparkwatch.core.windows import Window
from sparkwatch_agent.shared.auth import load_token

ENV_COORDINATOR = "SPARKWATCH_COORDINATOR"
ENV_TOKEN_FILE = "SPARKWATCH_TOKEN_FILE"
DEFAULT_COORDINATOR = "http://127.0.0.1:8750"
WINDOWS_PER_POST = 10_000


class CoordinatorError(Exception):
    """The coordinator could not be reached or refused a request (``status``: its HTTP status, if any)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        """A 4xx: sending the same request again cannot succeed."""
        return self.status is not None and 400 <= self.status < 500


@dataclass(frozen=True, slots=True)
class CoordinatorTarget:
    """Where the coordinator is and how to authenticate (from flags, else the environment)."""

    url: str
    token: str | None

    @classmethod
    def resolve(
        cls, url: str | None, token_file: Path | None, environ: Mapping[str, str] | None = None
    ) -> CoordinatorTarget:
        env = os.environ if environ is None else environ
        chosen = (url or env.get(ENV_COORDINATOR) or DEFAULT_COORDINATOR).rstrip("/")
        if not chosen.startswith(("http://", "https://")):
            raise CoordinatorError(f"coordinator URL must start with http:// or https://: {chosen!r}")
        path = token_file or (Path(env[ENV_TOKEN_FILE]) if env.get(ENV_TOKEN_FILE) else None)
        return cls(chosen, load_token(path) if path else None)


class CoordinatorClient:
    """One aiohttp session to one coordinator; use as ``async with CoordinatorClient(target) as c``."""

    def __init__(self, target: CoordinatorTarget, timeout_s: float = 30.0) -> None:
        self.target = target
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        self._session = aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s))

    async def __aenter__(self) -> CoordinatorClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._session.close()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.target.url}{path}"
        try:
            async with self._session.request(method, url, json=body) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    message = f"{method} {url}: HTTP {resp.status}: {_reason(text)}"
                    raise CoordinatorError(message, resp.status)
                return json.loads(text) if text else None
        except aiohttp.ClientError as exc:
            raise CoordinatorError(f"cannot reach the coordinator at {self.target.url}: {exc}") from None
        except TimeoutError:
            raise CoordinatorError(f"{method} {url}: no answer in time") from None
        except ValueError:
            raise CoordinatorError(f"{method} {url}: the answer is not JSON") from None

    async def create_run(
        self, name: str, interval_s: float = 0.1, scope: str = "request", gate_threshold: float = 0.5
    ) -> dict[str, Any]:
        body = {"name": name, "interval_s": interval_s, "scope": scope, "gate_threshold": gate_threshold}
        result: dict[str, Any] = await self._call("POST", "/v1/runs", body)
        return result

    async def run(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", f"/v1/runs/{run_id}")
        return result

    async def end_run(self, run_id: str, command: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"command": command} if command is not None else {}
        result: dict[str, Any] = await self._call("POST", f"/v1/runs/{run_id}/end", body)
        return result

    async def add_windows(self, run_id: str, windows: Sequence[Window]) -> int:
        """Posts in batches; each batch is all-or-nothing on the coordinator."""
        stored = 0
        for i in range(0, len(windows), WINDOWS_PER_POST):
            batch = [w.to_body() for w in windows[i : i + WINDOWS_PER_POST]]
            result = await self._call("POST", f"/v1/runs/{run_id}/windows", {"windows": batch})
            stored += int(result["stored"])
        return stored

    async def export(self, run_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", f"/v1/runs/{run_id}/export")
        return result

    async def nodes(self) -> list[dict[str, Any]]:
        result = await self._call("GET", "/v1/nodes")
        return list(result["nodes"])


def _reason(text: str) -> str:
    """The coordinator's JSON reason in one line (or the start of whatever else it sent)."""
    try:
        body = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200] or "(empty body)"
    if isinstance(body, dict) and "reason" in body:
        reason = body["reason"]
        if isinstance(reason, list):
            return "; ".join(f"{r.get('loc', '')}: {r.get('msg', '')}" for r in reason if isinstance(r, dict))
        return str(reason)
    return json.dumps(body)[:200]
