"""A meter read through any Prometheus HTTP API: ``GET /api/v1/query?query=…`` must return one series whose
value is watts (an exporter already watching a PDU or a smart plug)."""

from __future__ import annotations

import math
from typing import Any

import aiohttp
from yarl import URL

from sparkwatch.http_redirects import get_on_host
from sparkwatch.meters.credentials import read_secret
from sparkwatch.meters.poller import json_answer
from sparkwatch.meters.readings import MeterError, Reading
from sparkwatch.meters.spec import MeterSpec


class PrometheusMeter:
    def __init__(self, spec: MeterSpec) -> None:
        if spec.query is None:
            raise ValueError("a prometheus meter needs a query")
        self._url = URL(f"{spec.url}/api/v1/query").with_query(query=spec.query)
        self._token_file = spec.bearer_token_file
        self._ssl = spec.verify_tls  # True: verify (the default); False: skip, as the table asked

    async def read(self, session: aiohttp.ClientSession) -> Reading:
        headers = {}
        if self._token_file is not None:
            headers["Authorization"] = f"Bearer {read_secret(self._token_file, in_header=True)}"
        # a redirect on the engine's own host followed, one elsewhere refused (http_redirects): aiohttp would
        # drop the token there and store that host's answer as this node's power
        async with get_on_host(
            session, self._url, "prometheus", MeterError, headers=headers, ssl=self._ssl
        ) as response:
            body: Any = await json_answer(response, "prometheus")
            if response.status != 200 or not isinstance(body, dict) or body.get("status") != "success":
                error = body.get("error") if isinstance(body, dict) else None
                raise MeterError(
                    f"prometheus answered HTTP {response.status}: {error or 'not a query result'}"
                )
        return Reading(power_w=_one_value(body.get("data")))

    def waiting_for(self) -> str | None:
        return None  # one request a poll: nothing outlives it

    async def close(self, session: aiohttp.ClientSession) -> None:
        """Nothing held: each query stands alone."""


def _one_value(data: Any) -> float:
    if not isinstance(data, dict):
        raise MeterError("prometheus query result has no data")
    kind, result = data.get("resultType"), data.get("result")
    sample: Any
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        sample = result
    elif kind == "vector" and isinstance(result, list) and len(result) == 1 and isinstance(result[0], dict):
        sample = result[0].get("value")
    else:
        count = len(result) if isinstance(result, list) else "no"
        raise MeterError(f"the meter's query must return one series, it returned {count} ({kind})")
    raw: Any = sample[1] if isinstance(sample, list) and len(sample) == 2 else None
    try:  # the API writes the value as a string: "301.5", "NaN", "+Inf"
        value = float(raw) if isinstance(raw, str | int | float) and not isinstance(raw, bool) else None
    except (ValueError, OverflowError):  # OverflowError: an integer of hundreds of digits
        value = None
    if value is None:
        raise MeterError(f"prometheus value is not a number: {sample!r:.80}")
    if not math.isfinite(value) or value < 0:
        raise MeterError(f"the meter's query gave {value} W")
    return value
