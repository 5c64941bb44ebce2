"""The proxy's stream watcher on one long SSE line beside copying the same bytes once (the floor): the
watcher searched its held line again at every chunk, so a 64 MB line cost it seconds while the copy cost
milliseconds. Each size is fed in 64 KiB chunks, as aiohttp hands them over, then one ordinary event.

    python benchmarks/sse_watch.py [--sizes-mb 8,32,64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from sparkwatch.proxy.sse_watch import ResponseWatcher

CHUNK_BYTES = 1 << 16
EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "stop"}]}\n\n'


def chunks_of(size_bytes: int) -> list[bytes]:
    body = b'data: {"pad": "' + b"x" * size_bytes + b'"}\n\n' + EVENT
    return [body[at : at + CHUNK_BYTES] for at in range(0, len(body), CHUNK_BYTES)]


def watched_s(chunks: list[bytes]) -> float:
    t0 = time.perf_counter()
    watcher = ResponseWatcher(streaming=True)
    for t, chunk in enumerate(chunks):
        watcher.feed(chunk, t)
    stamps = watcher.finish(len(chunks))
    took = time.perf_counter() - t0
    assert stamps.t_first_token_ns is not None  # the event after the long line was read
    return took


def copied_s(chunks: list[bytes]) -> float:
    t0 = time.perf_counter()
    out = bytearray()
    for chunk in chunks:
        out += chunk
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="8,32,64")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'line MB':>8} {'watcher s':>10} {'copy s':>8} {'ratio':>7}   (medians of {args.rounds})")
    for size_mb in (int(s) for s in args.sizes_mb.split(",")):
        chunks = chunks_of(size_mb * 1_000_000)
        watched, copied = [], []
        for _ in range(args.rounds):  # interleaved: both see the same machine noise
            watched.append(watched_s(chunks))
            copied.append(copied_s(chunks))
        w, c = statistics.median(watched), statistics.median(copied)
        print(f"{size_mb:>8} {w:>10.4f} {c:>8.4f} {w / c:>7.1f}")


if __name__ == "__main__":
    main()
