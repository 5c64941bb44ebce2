"""A fake ``lmx`` for tests, run as a script: ``lmx speed-test run vllm --mode remote --base-url URL …``.

It does what lmx's remote speed test does (LottoLottoLotto/localmaxxing-cli cmd/lmx/main.go @338a68be,
summarised in docs/importers.md): GET ``/v1/models`` and ``/props`` (failures tolerated), then per warm-up
an ``endpoint_warmup_request`` line and one streamed ``POST /v1/chat/completions``, then per timed
iteration ``--concurrency`` requests in parallel and one ``endpoint_iteration_complete``. TTFT runs from
before the request is sent to the first SSE chunk with generated text (a role-only chunk does not count);
``first_token_received`` is printed at that moment. Status lines go to stderr as Go's ``json.Marshal``
writes a ``map[string]any`` (compact, keys sorted, ``time`` RFC 3339 UTC whole seconds); the payload file is
pretty-printed with ``samples[]`` only when iterations > 1 or concurrency > 1.

Values lmx computes in ways the research did not pin down (``tokSPrefill``, ``tokSTotal``, provenance,
the runs/ file name) are plausible stand-ins. Test-only environment variables, never lmx's:
``FAKE_LMX_TRUTH=PATH`` writes one JSON line per request with its true wall-clock stamps (ns);
``FAKE_LMX_NOISE=1`` also prints an event lmx does not have and a line that is not JSON on stderr.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import secrets
import statistics
import sys
import threading
import time
import urllib.parse
from typing import Any

VALUE_FLAGS = {
    "mode", "base-url", "warmup", "iterations", "concurrency", "out", "max-tokens", "served-model", "hf-id",
    "prompt", "quantization", "endpoint-timeout-seconds", "runs-dir",
}  # fmt: skip
PROMPT = "Write a short story about a lighthouse keeper."
LOCK = threading.Lock()
WALL0, MONO0 = time.time_ns(), time.perf_counter_ns()


def now_ns() -> int:
    """Wall-clock ns read off one (wall, monotonic) pair: differences are monotonic, like Go's time.Now()."""
    return WALL0 + time.perf_counter_ns() - MONO0


def go_value(value: Any) -> Any:
    """As Go marshals it: a float64 that is integral prints as an integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: go_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [go_value(v) for v in value]
    return value


def status(event: str, **fields: Any) -> int:
    """lmx's printStatus under --json-status: nil and "" fields dropped, one line on stderr. Answers when the
    line went out: concurrent requests' lines may leave in another order than their stamps were taken."""
    payload = {"event": event, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    payload.update({k: v for k, v in fields.items() if v is not None and str(v) != ""})
    line = json.dumps(go_value(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    with LOCK:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        return time.perf_counter_ns()


def parse_args(argv: list[str]) -> tuple[list[str], dict[str, str], set[str]]:
    words: list[str] = []
    options: dict[str, str] = {}
    flags: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if eq:
                options[name] = value
            elif name in VALUE_FLAGS:
                options[name] = argv[i + 1]
                i += 1
            else:
                flags.add(name)
        else:
            words.append(arg)
        i += 1
    return words, options, flags


def base_url(raw: str) -> str:
    """openAIBaseURL: trailing slashes and one /v1 dropped."""
    value = raw.strip().rstrip("/")
    return value[: -len("/v1")] if value.endswith("/v1") else value


def connection(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout_s), parts.path


def get_json(url: str, path: str) -> Any:
    conn, prefix = connection(url, 30)
    try:
        conn.request("GET", prefix + path)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise OSError(f"HTTP {response.status}")
        return json.loads(body)
    finally:
        conn.close()


def stream_content(chunk: dict[str, Any]) -> str:
    """generatedContent of choice 0's delta: reasoning (or reasoning_content), then content."""
    choices = chunk.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta") or {}
    reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
    return str(reasoning) + str(delta.get("content") or "")


def timed_chat(url: str, body: dict[str, Any]) -> dict[str, Any]:
    """timedChatCompletion + readOpenAIStream: the probe of one streamed request."""
    conn, prefix = connection(url, 600)
    probe: dict[str, Any] = {"started": now_ns(), "first": None, "last": None, "usage": None}
    try:
        conn.request(
            "POST", prefix + "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        if response.status != 200:
            raise OSError(f"HTTP {response.status}: {response.read()[:200]!r}")
        while line := response.readline():
            text = line.decode().strip()
            if not text.startswith("data:"):
                continue
            data = text[len("data:") :].strip()
            if not data or data == "[DONE]":
                continue
            chunk = json.loads(data)
            if isinstance(chunk.get("usage"), dict):
                probe["usage"] = chunk["usage"]
            if not stream_content(chunk):
                continue
            t = now_ns()
            if probe["first"] is None:
                probe["first"] = t
                ttft_ms = round_metric((t - probe["started"]) / 1e6)
                probe["printed"] = status("first_token_received", ttftMs=ttft_ms)
            probe["last"] = t
        probe["completed"] = now_ns()
    finally:
        conn.close()
    return probe


def round_metric(value: float) -> float:
    return round(value * 100) / 100


def round1(value: float) -> float:
    return round(value * 10) / 10


def request_body(model: str, max_tokens: int) -> dict[str, Any]:
    nonce = secrets.token_hex(16)
    return {
        "model": model,
        "messages": [{"role": "user", "content": f"[LocalMaxxing cache-bust nonce: {nonce}]\n{PROMPT}"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def sample_of(probe: dict[str, Any], iteration: int, request: int) -> dict[str, Any]:
    """One samples[] entry, tokSOut as decodeThroughput computes it."""
    usage = probe["usage"] or {}
    out, prompt = usage.get("completion_tokens", 0), usage.get("prompt_tokens", 0)
    ttft_ms = round_metric((probe["first"] - probe["started"]) / 1e6)
    if out > 1 and probe["last"] > probe["first"]:
        rate, how = round1((out - 1) / ((probe["last"] - probe["first"]) / 1e9)), "inter_token"
    else:
        rate, how = round1(out / ((probe["completed"] - probe["first"]) / 1e9)), "request_window"
    return {
        "iteration": iteration, "request": request, "promptTokens": float(prompt), "outputTokens": float(out),
        "tokSOut": rate, "ttftMs": ttft_ms, "tokSPrefill": round1(prompt / (ttft_ms / 1e3)), "_source": how,
    }  # fmt: skip


def truth(path: str | None, probe: dict[str, Any], **where: Any) -> None:
    if path:
        row = {**where, **{k: probe[k] for k in ("started", "first", "last", "completed", "printed")}}
        row["output_tokens"] = (probe["usage"] or {}).get("completion_tokens")
        with LOCK, open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def measure(url: str, model: str, opts: dict[str, str], noise: bool) -> list[dict[str, Any]]:
    """measureOpenAIEndpoint: warm-ups, then the timed iterations; returns the samples."""
    warmup, iterations = int(opts.get("warmup", "1")), int(opts.get("iterations", "3"))
    concurrency, max_tokens = int(opts.get("concurrency", "1")), int(opts.get("max-tokens", "256"))
    side = os.environ.get("FAKE_LMX_TRUTH")
    for i in range(warmup):
        status("endpoint_warmup_request", index=i + 1, warmup=warmup)
        truth(side, timed_chat(url, request_body(model, max_tokens)), phase="warmup", index=i + 1)
    if noise:
        status("speed_test_future_event", detail="an event this lmx version does not have")
        with LOCK:
            sys.stderr.write("[localmaxxing] warm-up done, timing now\n")
            sys.stderr.flush()
    samples: list[dict[str, Any]] = []
    for i in range(iterations):
        probes: list[dict[str, Any]] = [{} for _ in range(concurrency)]

        def run(k: int, iteration: int, probes: list[dict[str, Any]]) -> None:
            probes[k] = timed_chat(url, request_body(model, max_tokens))
            truth(side, probes[k], phase="timed", iteration=iteration + 1, request=k + 1)

        threads = [threading.Thread(target=run, args=(k, i, probes)) for k in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        samples += [sample_of(p, i + 1, k + 1) for k, p in enumerate(probes)]
        fields = {"iteration": i + 1, "iterations": iterations, "concurrency": concurrency}
        status("endpoint_iteration_complete", **fields, tokSOut=samples[-1]["tokSOut"])
    return samples


def payload_of(
    engine: str, url: str, model: str, opts: dict[str, str], samples: list[dict[str, Any]]
) -> dict[str, Any]:
    median = statistics.median
    out = median(s["outputTokens"] for s in samples)
    prompt = median(s["promptTokens"] for s in samples)
    ttft, rate = (
        round_metric(median(s["ttftMs"] for s in samples)),
        round1(median(s["tokSOut"] for s in samples)),
    )
    flags = {
        "mode": "remote", "baseUrl": url, "servedModel": model, "servedModelSource": "v1_models",
        "stream": True, "maxTokens": int(opts.get("max-tokens", "256")), "timeoutSeconds": 600,
        "warmup": int(opts.get("warmup", "1")), "iterations": int(opts.get("iterations", "3")),
        "concurrency": int(opts.get("concurrency", "1")), "promptSource": "default",
        "prefixCacheBust": "leading_nonce_per_request",
    }  # fmt: skip
    payload: dict[str, Any] = {
        "engineName": engine, "hfId": opts.get("hf-id", model),
        "quantization": opts.get("quantization", "fp16"),
        "benchmarkMode": "remote", "detectedEngines": [], "prompt": PROMPT, "outputText": "",
        "promptTokens": prompt, "engineFlags": flags,
        "tokenSources": {"prompt": "endpoint_usage", "output": "endpoint_usage"},
        "timingSource": "client_observed_http", "metricSource": "remote_endpoint",
        "ttftSource": "client_observed_http", "batchSize": flags["concurrency"], "outputTokens": out,
        "tokSOut": rate, "tokSOutSource": samples[0]["_source"], "tokSTotal": round1(rate * 1.05),
        "ttftMs": ttft, "tokSPrefill": round1(prompt / (ttft / 1e3)), "tokSPrefillSource": "ttft",
        "prefillTokens": prompt, "provenance": {"tool": "fake_lmx (sparkwatch tests)"},
        "agentFeedback": {"status": "ready", "message": "fake", "canSubmit": False},
    }  # fmt: skip
    if flags["iterations"] > 1 or flags["concurrency"] > 1:
        payload["samples"] = [{k: v for k, v in s.items() if k != "_source"} for s in samples]
        payload["sampleStats"] = {"tokSOut": {"count": len(samples), "p50": rate}}
    return payload


def main(argv: list[str]) -> int:
    words, opts, _flags = parse_args(argv)
    if words[:2] != ["speed-test", "run"] or len(words) < 3 or opts.get("mode") != "remote":
        sys.stderr.write("fake lmx: only `speed-test run ENGINE --mode remote --base-url URL` is faked\n")
        return 2
    engine, url = words[2], base_url(opts["base-url"])
    status("speed_test_mode_selected", mode="remote", engine=engine, model=opts.get("hf-id", ""))
    model = opts.get("served-model", "")
    status("speed_test_remote_start", baseUrl=url, servedModel=model)
    try:
        listed = get_json(url, "/v1/models")["data"][0]["id"]
        if not model:
            model = listed
            status("served_model_detected", servedModel=model, source="v1_models")
    except (OSError, ValueError, KeyError, IndexError) as exc:
        model = model or opts.get("hf-id", "unknown")
        status("served_model_fallback", servedModel=model, source="hf_id", reason=str(exc))
    with contextlib.suppress(OSError, ValueError):
        get_json(url, "/props")  # llama.cpp only; a failure is ignored
    try:
        samples = measure(url, model, opts, os.environ.get("FAKE_LMX_NOISE") == "1")
    except (OSError, ValueError) as exc:
        status("error", code="endpoint_benchmark_failed", message=str(exc), hints=["check --base-url"])
        return 1
    status("token_count_source", prompt="endpoint_usage", output="endpoint_usage",
           promptTokens=statistics.median(s["promptTokens"] for s in samples))  # fmt: skip
    payload = payload_of(engine, url, model, opts, samples)
    ready = {k: payload[k] for k in ("tokSOut", "tokSPrefill", "tokSTotal", "ttftMs")}
    status("speed_test_payload_ready", mode="remote", **ready)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", payload["hfId"])
    out = opts.get("out") or os.path.join(
        opts.get("runs-dir", "runs"), safe, time.strftime("%Y%m%dT%H%M%SZ.json", time.gmtime())
    )
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(json.dumps(go_value(payload), indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    status("speed_test_payload_file_written", path=out, pathAbsolute=os.path.abspath(out), engine=engine)
    status(
        "speed_test_payload_status",
        status="ready",
        message="payload written",
        outputPath=out,
        canSubmit=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
