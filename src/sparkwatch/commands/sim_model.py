"""A simulated OpenAI-compatible model server for the demo and tests: deterministic text at a fixed rate.

It streams like vLLM/SGLang do (a role-only first chunk, one token per chunk, a final ``usage`` chunk when
``stream_options.include_usage`` is set, ``data: [DONE]``) and tells its owner when it is busy, so the
demo can drive the simulated GPUs' utilisation while it generates. The first request is "cold" (as when
a server captures CUDA graphs on first use) and reports a higher load than the warm ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from sparkwatch.commands.sim_drive import DrivenAgents, driving
from sparkwatch.defaults import MAX_SIM_TOKENS
from sparkwatch_agent.shared.http import SIM_MODEL_SERVER, json_error, name_server, start_site
from sparkwatch_agent.shared.lifecycle import stop_on_signals
from sparkwatch_agent.shared.strict_text import TextFormatError, loads_json

log = logging.getLogger(__name__)

WORDS = (
    "the", "quick", "measured", "watt", "follows", "every", "token", "across", "four", "nodes", "while",
    "unified", "memory", "holds", "the", "weights", "and", "the", "coordinator", "joins", "samples", "to",
    "windows", "without", "loss",
)  # fmt: skip
MODEL_ID = "sparkwatch-sim-model"


@dataclass(frozen=True, slots=True)
class SimModelSpec:
    tokens_per_s: float = 76.0
    prefill_tokens_per_s: float = 4000.0
    default_max_tokens: int = 256


class SimModel:
    """Generation state: how many requests are in flight; ``on_load(level)`` hears 'cold', 'warm', 'idle'."""

    def __init__(
        self,
        spec: SimModelSpec | None = None,
        on_load: Callable[[str], None] | None = None,
        mono_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec or SimModelSpec()
        self.requests_served = 0
        self._on_load = on_load or (lambda _level: None)
        self._mono = mono_s
        self._active = 0

    def _begin(self) -> None:
        self._active += 1
        self._on_load("cold" if self.requests_served == 0 else "warm")

    def _end(self) -> None:
        self._active -= 1
        self.requests_served += 1
        if self._active == 0:
            self._on_load("idle")

    def text(self, index: int, count: int) -> list[str]:
        return [WORDS[(index * 7 + i) % len(WORDS)] + " " for i in range(count)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = loads_json(await request.read())
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            max_tokens = int(
                body.get("max_completion_tokens") or body.get("max_tokens") or self.spec.default_max_tokens
            )
            if not 1 <= max_tokens <= MAX_SIM_TOKENS:
                raise ValueError(f"max_tokens must be within [1, {MAX_SIM_TOKENS}]")
        except TextFormatError as exc:  # a ValueError too: first
            return json_error(400, "invalid_request", f"the body {exc}")
        except (ValueError, TypeError) as exc:
            return json_error(400, "invalid_request", str(exc))
        chat = request.path.endswith("/chat/completions")
        prompt_tokens = _prompt_tokens(body, chat)
        stream = bool(body.get("stream"))
        usage_wanted = bool((body.get("stream_options") or {}).get("include_usage"))
        index = self.requests_served + self._active
        words = self.text(index, max_tokens)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": max_tokens,
            "total_tokens": prompt_tokens + max_tokens,
        }
        rid = f"cmpl-sim-{index}"
        self._begin()
        try:
            await asyncio.sleep(max(0.02, prompt_tokens / self.spec.prefill_tokens_per_s))
            if not stream:
                await asyncio.sleep(max_tokens / self.spec.tokens_per_s)
                choice: dict[str, Any] = (
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "".join(words)},
                        "finish_reason": "length",
                    }
                    if chat
                    else {"index": 0, "text": "".join(words), "finish_reason": "length"}
                )
                return web.json_response(
                    {
                        "id": rid,
                        "object": "chat.completion" if chat else "text_completion",
                        "model": MODEL_ID,
                        "choices": [choice],
                        "usage": usage,
                    }
                )
            try:
                return await self._stream(request, rid, chat, words, usage if usage_wanted else None)
            except ConnectionResetError:  # the client went away mid-stream: its business, not an error
                log.info("request %s: the client disconnected mid-stream", rid)
                return web.Response(status=499)  # never sent: the connection is gone
        finally:
            self._end()

    async def _stream(
        self, request: web.Request, rid: str, chat: bool, words: list[str], usage: dict[str, int] | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        kind = "chat.completion.chunk" if chat else "text_completion"

        async def event(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> None:
            payload = {"id": rid, "object": kind, "model": MODEL_ID, "choices": choices, **(extra or {})}
            await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        if chat:  # vLLM and SGLang open with a role-only chunk: a first byte, not a first token
            await event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        period = 1.0 / self.spec.tokens_per_s
        start = self._mono()
        for i, word in enumerate(words):
            last = i == len(words) - 1
            piece = {"content": word} if chat else None
            choice = (
                {"index": 0, "delta": piece, "finish_reason": "length" if last else None}
                if chat
                else {"index": 0, "text": word, "finish_reason": "length" if last else None}
            )
            await event([choice])
            delay = start + (i + 1) * period - self._mono()  # absolute deadlines: no drift in the rate
            if not last and delay > 0:
                await asyncio.sleep(delay)
        if usage is not None:
            await event([], {"usage": usage})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    """Whitespace words stand in for tokens (the sim has no tokenizer)."""
    if chat:
        messages = body.get("messages") or []
        text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    else:
        text = str(body.get("prompt", ""))
    return max(1, len(text.split()))


def make_sim_model_app(model: SimModel) -> web.Application:
    app = web.Application()
    name_server(app, SIM_MODEL_SERVER)
    app.router.add_post("/v1/chat/completions", model.handle)
    app.router.add_post("/v1/completions", model.handle)

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})

    app.router.add_get("/v1/models", models)
    return app


@contextlib.asynccontextmanager
async def running_sim_model(model: SimModel, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """The simulated model on host:port (0: a free port) until the block ends; yields its URL."""
    # a stop cuts a request still streaming after 1 s (aiohttp's default waits 60 s for it)
    runner = web.AppRunner(
        make_sim_model_app(model), handle_signals=False, access_log=None, shutdown_timeout=1.0
    )
    url = await start_site(runner, host, port)
    try:
        yield url
    finally:
        await runner.cleanup()


async def serve_sim_model(
    host: str, port: int, spec: SimModelSpec, agents: DrivenAgents | None = None
) -> int:
    """`sparkwatch sim-model`: the simulated model, driving ``agents``' simulated GPUs while it generates
    (sim_drive), until SIGINT/SIGTERM."""
    stop = stop_on_signals(logger=log)
    async with driving(agents) as driver:
        model = SimModel(spec, on_load=driver.on_load if driver is not None else None)
        async with running_sim_model(model, host, port) as url:
            driven = f", driving {len(agents.urls)} sim agent(s)" if driver is not None and agents else ""
            log.info("simulated model on %s/v1 (%g tok/s%s)", url, spec.tokens_per_s, driven)
            await stop.wait()
    return 0
