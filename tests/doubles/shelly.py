"""A Shelly Gen2 device's HTTP RPC as its docs and real captures show it (shelly-api-docs.shelly.cloud
gen2 Switch/PM1 GetStatus; aioshelly's device fixtures): ``GET /rpc/Switch.GetStatus?id=0`` answers the
switch's status with ``apower`` (W) and ``aenergy.total`` (Wh), an unknown id answers
``{"code": -105, "message": "Argument 'id', value N not found!"}``, and with a password every RPC needs HTTP
digest authentication, SHA-256 as RFC 7616, user ``admin``, realm the device id, a 401 with an empty body
and the challenge in ``WWW-Authenticate``. ``raw`` answers fields with JSON text of a test's choosing, as a
firmware could write it (``1e999``, which parses to inf; ``true``; ``"300"``)."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

REALM = "shellyplusplugs-e465b8b3a1c4"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class ShellyPlug:
    """Scripted power; the energy counter integrates it (Wh) as time passes."""

    power_w: float = 0.0
    password: str | None = None
    metering: bool = True
    total_wh: float = 7258.589
    _since: float = field(default_factory=time.monotonic)
    nonces: set[str] = field(default_factory=set)
    requests: int = 0
    down_until: float = 0.0  # time.monotonic(): until then every request answers 503 (see go_down)
    #: Fields (dotted: ``aenergy.total``) answered with this JSON text instead of their value.
    raw: dict[str, str] = field(default_factory=dict)

    def go_down(self, seconds: float) -> None:
        """Answer 503 for ``seconds`` (a plug rebooting, a Wi-Fi drop): each poll meanwhile fails."""
        self.down_until = time.monotonic() + seconds

    def set_power(self, power_w: float) -> None:
        self._advance()
        self.power_w = power_w

    def _advance(self) -> None:
        now = time.monotonic()
        self.total_wh += self.power_w * (now - self._since) / 3600
        self._since = now

    def status(self) -> dict[str, Any]:
        self._advance()
        base: dict[str, Any] = {
            "id": 0,
            "source": "init",
            "output": True,
            "temperature": {"tC": 32.1, "tF": 89.7},
        }
        if not self.metering:  # e.g. a Shelly Pro 3: no apower, no aenergy
            return base
        minute = int(time.time()) // 60 * 60
        return {
            **base,
            "apower": round(self.power_w, 1),
            "voltage": 227.9,
            "current": round(self.power_w / 227.9, 3),
            "aenergy": {
                "total": round(self.total_wh, 3),
                "by_minute": [34.786, 45.552, 45.552],
                "minute_ts": minute,
            },
        }

    def _authorised(self, request: web.Request) -> bool:
        if self.password is None:
            return True
        header = request.headers.get("Authorization", "")
        if not header.startswith("Digest "):
            return False
        parts = dict(re.findall(r'(\w+)="?([^",]*)"?', header[7:]))
        if parts.get("username") != "admin" or parts.get("nonce") not in self.nonces:
            return False
        ha1 = _sha(f"admin:{REALM}:{self.password}")
        ha2 = _sha(f"{request.method}:{parts.get('uri', '')}")
        expected = _sha(
            f"{ha1}:{parts['nonce']}:{parts.get('nc')}:{parts.get('cnonce')}:{parts.get('qop')}:{ha2}"
        )
        return secrets.compare_digest(expected, parts.get("response", ""))

    async def get_status(self, request: web.Request) -> web.Response:
        self.requests += 1
        if time.monotonic() < self.down_until:
            return web.Response(status=503, text="Service Unavailable")
        if not self._authorised(request):
            nonce = secrets.token_hex(4)
            self.nonces.add(nonce)
            challenge = f'Digest qop="auth", realm="{REALM}", nonce="{nonce}", algorithm=SHA-256'
            return web.Response(status=401, headers={"WWW-Authenticate": challenge})
        if request.query.get("id") != "0":
            body = {"code": -105, "message": f"Argument 'id', value {request.query.get('id')} not found!"}
            return web.json_response(body, status=400)
        return web.Response(text=json_with_raw(self.status(), self.raw), content_type="application/json")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/rpc/Switch.GetStatus", self.get_status)
        return app


def json_with_raw(body: dict[str, Any], raw: dict[str, str]) -> str:
    """``body`` as JSON, each field that ``raw`` names (dotted for a nested one, a number for an array's
    element: ``PowerControl.0.PowerConsumedWatts``) written as ``raw``'s text: what ``json.dumps`` cannot
    write (``1e999``, an integer of 400 digits)."""
    body = json.loads(json.dumps(body))  # a copy to write into
    for path in raw:
        *parents, key = path.split(".")
        at: Any = body
        for parent in parents:
            at = at[int(parent)] if isinstance(at, list) else at.setdefault(parent, {})
        at[key] = f"@raw:{path}@"
    text = json.dumps(body)
    for path, value in raw.items():
        text = text.replace(json.dumps(f"@raw:{path}@"), value)
    return text
