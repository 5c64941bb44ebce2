"""A BMC's chassis power over Redfish (DMTF DSP0266; resources as in DMTF's public-rackmount1 mockup).

From the service root ``/redfish/v1/`` the reader follows ``Chassis`` to the chassis (the one named by
``chassis``, else the first member), then reads ``EnvironmentMetrics`` → ``PowerWatts.Reading`` (W) and
``EnergykWh.Reading`` where the chassis has them, else the older ``Power`` → ``PowerControl[0].
PowerConsumedWatts``. ``PowerSubsystem`` holds capacity and allocation, not a reading, so it is not used.
``PowerConsumedWatts`` is at least 0 by its schema and ``PowerWatts`` is the chassis' draw: a value that
readings.py refuses (negative, not a finite number, ``true``, a string) is a failed poll naming the
property, as is an ``EnergykWh.Reading`` it refuses. A ``null`` reading (the schema allows it) is no power
(a failed poll), or no counter.

With credentials it opens a Redfish session (``POST`` to the service root's ``Links.Sessions`` with
``UserName``/``Password``, then the ``X-Auth-Token`` header) and falls back to HTTP basic auth when the
service hands out no token. Nothing of a credential is logged, stored or exported.

The chassis' resource is found once, in a task of its own that outlives a poll's timeout (four requests one
after another: at 0.6 s each, a BMC had never given a reading at the default 1 s poll, every poll beginning
again), and looked for again after a read that failed. When ``Power`` stands in for an EnvironmentMetrics
without a usable reading (another sensor, maybe), that is logged, and EnvironmentMetrics is tried again every
``PREFERRED_RETRY_S`` (the stand-in read meanwhile). The stop cancels a search still going.

Credentials the BMC refused are not offered again for ``REFUSED_RETRY_S`` unless the password file changes:
a BMC locks an account after a few failed logins (``AccountService.AccountLockoutThreshold``), and a poll a
second would lock out the operator's account too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from yarl import URL

from sparkwatch.http_redirects import get_on_host
from sparkwatch.meters.credentials import read_secret
from sparkwatch.meters.poller import json_answer
from sparkwatch.meters.readings import MeterError, Reading, number, with_counter
from sparkwatch.meters.spec import MeterSpec
from sparkwatch_agent.shared.strict_text import cut_short

log = logging.getLogger(__name__)

ROOT = "/redfish/v1/"
KWH_J = 3.6e6
#: How long refused credentials rest before they are offered again (unless the password file changes).
REFUSED_RETRY_S = 300.0
#: How long finding the chassis' power resource may take in all, over as many polls as it needs.
DISCOVERY_TIMEOUT_S = 30.0
#: How long ``Power`` stands in for an EnvironmentMetrics without a usable reading before it is tried again.
PREFERRED_RETRY_S = 300.0
#: The resources a reading is read from, as the log names them.
_READINGS = {
    "env": "EnvironmentMetrics PowerWatts.Reading",
    "power": "Power PowerControl[0].PowerConsumedWatts",
}


class RedfishMeter:
    def __init__(self, spec: MeterSpec, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._base = spec.url
        self._spec = spec
        self._ssl = spec.verify_tls
        self._monotonic = monotonic
        self._headers: dict[str, str] = {}
        self._logged_in = False
        self._password_sha = ""  # of the password offered last
        self._refused: tuple[str, float, str] | None = None  # the refused password's sha, when, what was said
        self._login_task: asyncio.Future[None] | None = None
        self._session_url: str | None = None  # the session's resource, deleted at the stop (a logout)
        self._basic_accepted = False  # basic auth's pair was answered once (not refused)
        self._reading_path: tuple[str, str] | None = None  # ("env" | "power", path)
        self._discovery: asyncio.Future[tuple[str, str]] | None = None  # finding it, across polls
        self._read_kind: str | None = None  # the kind found last (the log says when it changes)
        self._stand_in_since: float | None = None  # when Power was chosen over an unusable EnvironmentMetrics

    async def read(self, session: aiohttp.ClientSession) -> Reading:
        if self._spec.username is not None and not self._logged_in:
            await self._one_login(session)
        try:
            kind, path = await self._resource(session)
            try:
                body = await self._get(session, path)
                return _environment(body) if kind == "env" else _power_control(body)
            except MeterError as exc:  # the BMC may have renumbered, or its reading gone null: look again
                self._reading_path = None
                if self._stand_in_since is None:
                    raise
                # the reason the stand-in is read at all, or the failure names only a resource not meant
                raise MeterError(
                    f"{exc} (read for EnvironmentMetrics, which has no usable PowerWatts.Reading)"
                ) from None
        except asyncio.CancelledError:  # the poll's timeout
            # credentials that met a slow answer are taken as refused; not while the search still goes on:
            # its own answer says (a 401 refuses them), and a slow BMC's search had them refused after it
            # had found the way with them, for REFUSED_RETRY_S
            searching = self._discovery is not None and not self._discovery.done()
            if "Authorization" in self._headers and not self._basic_accepted and not searching:
                self._refused = (self._password_sha, self._monotonic(), self._unanswered())
                self._logged_in = False  # the next poll checks the back-off before offering them again
            raise

    def waiting_for(self) -> str | None:
        """What a poll that timed out left going on, which the next poll waits for."""
        if self._login_task is not None and not self._login_task.done():
            return "the redfish login goes on (the next poll waits for it)"
        if self._discovery is not None and not self._discovery.done():
            return "the search for redfish's power reading goes on (the next poll waits for it)"
        return None

    async def _resource(self, session: aiohttp.ClientSession) -> tuple[str, str]:
        """Where the reading is: found once, in a task shielded from the poll's timeout (a slow BMC's next
        poll waits for the same search), again after a failed read, and while ``Power`` stands in for an
        unusable EnvironmentMetrics, again every ``PREFERRED_RETRY_S`` behind the polls, which read the
        stand-in meanwhile (a failed retry had every later poll search again, and fail)."""
        found, since, now = self._reading_path, self._stand_in_since, self._monotonic()
        idle = self._discovery is None or self._discovery.done()
        if found is not None:  # the stand-in is read meanwhile; a retry that fails tries again in as long
            if since is not None and now - since >= PREFERRED_RETRY_S and idle:
                self._stand_in_since = now
                self._search(session)
            return found
        if idle:
            self._search(session)
        assert self._discovery is not None
        return await asyncio.shield(self._discovery)

    def _search(self, session: aiohttp.ClientSession) -> None:
        self._discovery = asyncio.ensure_future(self._find(session))
        self._discovery.add_done_callback(_retrieved)

    async def _find(self, session: aiohttp.ClientSession) -> tuple[str, str]:
        try:
            async with asyncio.timeout(DISCOVERY_TIMEOUT_S):
                kind, path, stand_in = await self._discover(session)
        except TimeoutError:
            raise MeterError(
                f"redfish did not show the way to the chassis' power reading within {DISCOVERY_TIMEOUT_S:g} s"
            ) from None
        if stand_in and (self._read_kind != kind or self._stand_in_since is None):
            log.warning(
                "redfish meter at %s: EnvironmentMetrics has no usable PowerWatts.Reading; reading %s instead"
                " (maybe another sensor), and EnvironmentMetrics again in %g s",
                *(self._base, _READINGS[kind], PREFERRED_RETRY_S),
            )
        elif self._read_kind not in (None, kind):
            log.warning("redfish meter at %s: reading %s again", self._base, _READINGS[kind])
        self._stand_in_since = self._monotonic() if stand_in else None
        self._reading_path, self._read_kind = (kind, path), kind
        return kind, path

    def _unanswered(self) -> str:
        return (
            f"redfish did not answer user {self._spec.username!r}'s basic auth within the poll's timeout"
            " (taken as refused: a BMC may slow its answer to a failed login)"
        )

    async def _one_login(self, session: aiohttp.ClientSession) -> None:
        """The login, shielded from the poll's timeout: a BMC that answers a refused login late (many slow
        it on purpose) still has the refusal counted, and the next poll waits for this login instead of
        sending another."""
        if self._login_task is None or self._login_task.done():
            self._login_task = asyncio.ensure_future(self._login(session))
            self._login_task.add_done_callback(_retrieved)
        await asyncio.shield(self._login_task)

    async def _get(self, session: aiohttp.ClientSession, path: str) -> dict[str, Any]:
        """``path``'s JSON object; a redirect on the BMC's own host followed (http_redirects)."""
        url = URL(self._base + path)
        async with get_on_host(
            session, url, "redfish", MeterError, headers=self._headers, ssl=self._ssl
        ) as r:
            return await self._body(r, path)

    async def _body(self, r: aiohttp.ClientResponse, path: str) -> dict[str, Any]:
        if r.status == 401:
            self._unauthorized(path)
        if "Authorization" in self._headers and path != ROOT:  # the service root is open to all
            self._basic_accepted = True
        if r.status != 200:
            raise MeterError(f"redfish answered HTTP {r.status} for {path}")
        body: Any = await json_answer(r, "redfish")
        if not isinstance(body, dict):
            raise MeterError(f"redfish {path} is not a JSON object")
        return body

    def _unauthorized(self, path: str) -> None:
        """A 401: no credentials given, an ended session (log in again next poll), or basic auth refused."""
        self._logged_in = False
        if self._spec.username is None:
            raise MeterError(
                f"redfish asks for credentials (HTTP 401 for {path}): give the meter username and"
                " password_file"
            )
        if not self._headers:  # the service root, read before a login: none was offered
            raise MeterError(f"redfish answered HTTP 401 for {path} before any credentials were sent")
        if "X-Auth-Token" in self._headers:
            raise MeterError(f"redfish ended the session (HTTP 401 for {path}): logging in again")
        self._refuse(f"redfish refused the credentials of user {self._spec.username!r} (HTTP 401 for {path})")

    def _refuse(self, said: str) -> None:
        self._refused = (self._password_sha, self._monotonic(), said)
        raise MeterError(said)

    def _still_refused(self, password_sha: str) -> None:
        """Refused credentials are not offered again for REFUSED_RETRY_S, unless the password changed."""
        if self._refused is None:
            return
        refused_sha, at, said = self._refused
        if refused_sha == password_sha and self._monotonic() - at < REFUSED_RETRY_S:
            # the same words each poll: the poller logs a failure when its words change
            again = f"not offered again for {REFUSED_RETRY_S:g} s after that, or until the password file"
            raise MeterError(f"{said}; {again} changes")
        self._refused = None

    async def _login(self, session: aiohttp.ClientSession) -> None:
        """A Redfish session when the service gives one, else basic auth on every request."""
        assert self._spec.username is not None
        password = read_secret(self._spec.password_file) if self._spec.password_file else ""
        self._password_sha = hashlib.sha256(password.encode()).hexdigest()
        self._still_refused(self._password_sha)
        self._headers, self._basic_accepted = {}, False
        root = await self._get(session, ROOT)
        sessions = _link(root.get("Links", {}), "Sessions") or "/redfish/v1/SessionService/Sessions"
        credentials = {"UserName": self._spec.username, "Password": password}
        async with session.post(
            self._base + sessions, json=credentials, ssl=self._ssl, allow_redirects=False
        ) as r:
            _not_redirected(r, sessions)
            status = r.status
            token = r.headers.get("X-Auth-Token") if status in (200, 201) else None
            if token:
                self._session_url = await self._session_resource(r, self._base + sessions)
        if status in (401, 403):  # basic auth with the same pair would be one more failed login
            self._refuse(
                f"redfish refused the credentials of user {self._spec.username!r}"
                f" (HTTP {status} for POST {sessions})"
            )
        if token:
            self._headers = {"X-Auth-Token": token}
        else:
            pair = base64.b64encode(f"{self._spec.username}:{password}".encode()).decode()
            self._headers = {"Authorization": f"Basic {pair}"}
        self._logged_in = True

    async def _session_resource(self, r: aiohttp.ClientResponse, posted_to: str) -> str | None:
        """Where the new session lives: the ``Location`` header (DSP0266), else the body's ``@odata.id``
        (a BMC that puts it there, as some do), resolved against the URL posted to. Only its path is kept
        when it names another place than the meter's URL (a BMC's inside address behind a tunnel, plain
        http): the token goes nowhere else."""
        where = r.headers.get("Location")
        if where is None:
            with contextlib.suppress(aiohttp.ClientError, ValueError):
                body = await r.json(content_type=None)
                where = body.get("@odata.id") if isinstance(body, dict) else None
        if not isinstance(where, str) or not where:
            return None
        url, base = urlsplit(urljoin(posted_to, where)), urlsplit(self._base)
        if (url.scheme, url.netloc) == (base.scheme, base.netloc):
            return url.geturl()
        return self._base + (url.path or "/") + (f"?{url.query}" if url.query else "")

    async def close(self, session: aiohttp.ClientSession) -> None:
        """Log out at the coordinator's stop: a BMC keeps a session until its timeout (often 30 min) and
        holds only a few, so a coordinator restarted a few times would use them all up. A login still
        running (shielded from a poll's timeout) is waited for, so that a session it made is logged out
        too (within the stop's bound, past which it is cancelled with this)."""
        if self._login_task is not None and not self._login_task.done():
            with contextlib.suppress(Exception):
                await self._login_task
        if self._discovery is not None and not self._discovery.done():  # never past the stop, nor the logout
            self._discovery.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._discovery
        url, token = self._session_url, self._headers.get("X-Auth-Token")
        self._session_url, self._logged_in, self._headers = None, False, {}
        if url is None or token is None:
            return
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.delete(
                url, headers={"X-Auth-Token": token}, ssl=self._ssl, allow_redirects=False
            ):
                pass

    async def _discover(self, session: aiohttp.ClientSession) -> tuple[str, str, bool]:
        """The reading's kind and path, and whether ``Power`` stands in for EnvironmentMetrics."""
        root = await self._get(session, ROOT)
        collection = _link(root, "Chassis")
        if collection is None:
            raise MeterError("redfish service root has no Chassis")
        listed = (await self._get(session, collection)).get("Members", [])
        if not isinstance(listed, list):
            raise MeterError(f"redfish {collection} Members is not a list, got {type(listed).__name__}")
        members = [_link({"m": m}, "m") for m in listed]
        paths = [m for m in members if m]
        wanted = self._spec.chassis
        chosen = (
            next((p for p in paths if p.rstrip("/").rsplit("/", 1)[-1] == wanted), None) if wanted else None
        )
        if chosen is None and wanted is not None:
            raise MeterError(f"redfish has no chassis {wanted!r} (it has {', '.join(paths) or 'none'})")
        if chosen is None and not paths:
            raise MeterError("redfish lists no chassis")
        chassis = await self._get(session, chosen or paths[0])
        environment, power = _link(chassis, "EnvironmentMetrics"), _link(chassis, "Power")
        if environment is not None:
            body = await self._get(session, environment)
            if _usable(_member(body, "PowerWatts").get("Reading")) or power is None:
                return ("env", environment, False)
        if power is not None:
            return ("power", power, environment is not None)
        raise MeterError(f"redfish chassis {chosen or paths[0]} has neither EnvironmentMetrics nor Power")


def _not_redirected(response: aiohttp.ClientResponse, path: str) -> None:
    """A login's (or logout's) redirect is not followed, wherever it points: the password is posted to the
    sessions resource the service root names, nowhere else."""
    if 300 <= response.status < 400:
        where = cut_short(response.headers.get("Location") or "nowhere said", 120)
        raise MeterError(
            f"redfish answered HTTP {response.status} for {path}, pointing to {where}: not followed"
        )


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A login or a search no poll waited for to the end: its failure is counted (a login's back-off) or
    looked for again at the next poll, not left unretrieved."""
    if not task.cancelled():
        task.exception()


def _link(body: Any, key: str) -> str | None:
    value = body.get(key) if isinstance(body, dict) else None
    target = value.get("@odata.id") if isinstance(value, dict) else None
    return target if isinstance(target, str) and target.startswith("/redfish/") else None


def _member(body: dict[str, Any], key: str) -> dict[str, Any]:
    """The object ``body[key]``; one that is absent or not an object has no properties."""
    value = body.get(key)
    return value if isinstance(value, dict) else {}


def _usable(value: Any) -> bool:
    """Whether a reading is one readings.py takes: at discovery, else the older ``Power`` is read."""
    try:
        number(value, "", "W")
    except MeterError:
        return False
    return True


def _environment(body: dict[str, Any]) -> Reading:
    power = _member(body, "PowerWatts").get("Reading")
    if power is None:
        raise MeterError("redfish EnvironmentMetrics has no PowerWatts.Reading")
    power_w = number(power, "redfish EnvironmentMetrics PowerWatts.Reading", "W")
    energy = _member(body, "EnergykWh").get("Reading")
    what = "redfish EnvironmentMetrics EnergykWh.Reading"
    return with_counter(power_w, energy, what, "kWh", KWH_J)


def _power_control(body: dict[str, Any]) -> Reading:
    controls = body.get("PowerControl")
    first = controls[0] if isinstance(controls, list) and controls and isinstance(controls[0], dict) else {}
    power = first.get("PowerConsumedWatts")
    if power is None:
        raise MeterError("redfish Power has no PowerControl[0].PowerConsumedWatts")
    return Reading(power_w=number(power, "redfish Power PowerControl[0].PowerConsumedWatts", "W"))
