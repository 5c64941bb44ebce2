"""A Shelly Gen2+ plug or meter over its HTTP RPC: ``GET /rpc/Switch.GetStatus?id=N`` (or
``PM1.GetStatus``) answers ``apower`` (W, the last measured active power) and ``aenergy.total`` (Wh).

Gen2 devices with a password want HTTP digest authentication (SHA-256, RFC 7616) as user ``admin``; an
error comes back as ``{"code": -105, "message": "Argument 'id', value 1 not found!"}`` with a status the
docs leave open. A switch without metering has no ``apower``: that is an error here, not a 0 W reading.

``apower`` is signed on devices that measure returned energy (``ret_aenergy``; the ``reverse`` option flips
the sign), and ``aenergy.total`` then counts both directions. A node only draws, so a negative ``apower``
is a failed poll that says so (the meter is wired the other way, or meters more than the node), not a
reading taken as its magnitude; so is any value readings.py refuses, in ``apower`` or ``aenergy.total``.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from yarl import URL

from sparkwatch.http_redirects import get_on_host
from sparkwatch.meters.credentials import read_secret
from sparkwatch.meters.poller import json_answer
from sparkwatch.meters.readings import MeterError, Reading, number, with_counter
from sparkwatch.meters.spec import MeterSpec

#: Shelly's digest user is always this one.
SHELLY_USER = "admin"
WH_J = 3600.0


class ShellyMeter:
    def __init__(self, spec: MeterSpec) -> None:
        self._url = f"{spec.url}/rpc/{spec.component}.GetStatus"
        self._params = {"id": str(spec.channel)}
        self._password_file = spec.password_file
        self._auth: tuple[str, aiohttp.DigestAuthMiddleware] | None = None  # the password it was made with

    def _middlewares(self) -> tuple[aiohttp.DigestAuthMiddleware, ...]:
        """Digest auth with the password file as it is now (read at each poll: a rotated password is taken
        at the next one); the same middleware while it is unchanged, which keeps its nonce between polls."""
        if self._password_file is None:
            return ()
        password = read_secret(self._password_file)
        if self._auth is None or self._auth[0] != password:
            self._auth = (password, aiohttp.DigestAuthMiddleware(SHELLY_USER, password))
        return (self._auth[1],)

    async def read(self, session: aiohttp.ClientSession) -> Reading:
        url = URL(self._url).with_query(self._params)
        async with get_on_host(
            session, url, "shelly", MeterError, middlewares=self._middlewares()
        ) as response:
            return await _answer(response, self._password_file is not None)

    def waiting_for(self) -> str | None:
        return None  # one request a poll: nothing outlives it

    async def close(self, session: aiohttp.ClientSession) -> None:
        """Nothing held: digest auth keeps no session on the plug."""


async def _answer(response: aiohttp.ClientResponse, with_password: bool) -> Reading:
    if response.status == 401:
        raise MeterError(
            "shelly refused the credentials (HTTP 401; digest auth as admin)"
            if with_password
            else "shelly wants a password (HTTP 401): give the meter a password_file"
        )
    body: Any = await json_answer(response, "shelly")
    if response.status != 200 or not isinstance(body, dict) or "code" in body:
        message = body.get("message") if isinstance(body, dict) else None
        raise MeterError(f"shelly answered HTTP {response.status}: {message or 'not a status object'}")
    return _reading(body)


def _reading(status: dict[str, Any]) -> Reading:
    power = status.get("apower")
    if power is None:
        raise MeterError("shelly status has no apower: this component does not meter power")
    power_w = number(power, "shelly apower", "W")
    energy = status.get("aenergy")  # absent: a device without a counter
    if energy is not None and not isinstance(energy, dict):
        return Reading(power_w, None, "shelly aenergy is not an object")
    total = None if energy is None else energy.get("total")
    return with_counter(power_w, total, "shelly aenergy.total", "Wh", WH_J)
