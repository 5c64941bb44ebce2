"""The replay ring (overflow accounting, gaps), the interval lease rules and the sample frame encoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkwatch_agent.hardware.readings import GpuReading, HostMemory, SensorReading, StatusReading
from sparkwatch_agent.sampling.leases import MAX_LEASES, IntervalLeases, TooManyLeases
from sparkwatch_agent.sampling.ring import SampleRing
from sparkwatch_agent.sampling.sample import Sample, encode_frame, encode_sample
from sparkwatch_agent.serving.stream_cursor import frames_after


def filled(capacity: int, count: int, block: int = 1) -> SampleRing:
    ring = SampleRing(capacity, block_frames=block)
    for seq in range(1, count + 1):
        ring.append(seq, f"f{seq}".encode())
    return ring


def test_ring_replays_after_seq_in_order() -> None:
    ring = filled(10, 7)
    piece = ring.after(4, 100)
    assert piece.frames == (b"f5", b"f6", b"f7")
    assert (piece.first_seq, piece.last_seq, piece.missing) == (5, 7, 0)
    assert ring.after(7, 100).frames == ()


def test_ring_overflow_drops_oldest_and_counts() -> None:
    ring = filled(5, 12)
    assert ring.dropped == 7
    assert len(ring) == 5
    piece = ring.after(2, 100)
    assert piece.missing == 5  # seqs 3..7 were overwritten
    assert piece.frames == (b"f8", b"f9", b"f10", b"f11", b"f12")
    assert piece.first_seq == 8 and piece.last_seq == 12


def test_compressed_blocks_replay_exactly_and_drop_whole_blocks() -> None:
    ring = filled(300, 1000, block=128)
    assert ring.dropped == 640 and len(ring) == 360  # keeps >= capacity, drops in whole blocks
    seen: list[bytes] = []
    last = 0
    while True:
        lines, last = frames_after(ring, last, 500)
        if not lines:
            break
        seen.extend(lines)
    assert seen[0].startswith(b'{"type":"gap"') and b'"missing":640' in seen[0]
    assert seen[1:] == [f"f{i}".encode() for i in range(641, 1001)]  # across compressed blocks and the head
    assert ring.after(700, 3).frames == (b"f701", b"f702", b"f703")


def test_ring_limit_and_seq_order_enforced() -> None:
    ring = filled(100, 50)
    assert len(ring.after(0, 10).frames) == 10
    with pytest.raises(ValueError):
        ring.append(52, b"x")


def test_frames_after_announces_gap_then_frames() -> None:
    ring = filled(3, 6)
    lines, last = frames_after(ring, 1, 100)
    assert lines[0].startswith(b'{"type":"gap"') and b'"missing":2' in lines[0]  # seqs 2 and 3
    assert lines[1:] == [b"f4", b"f5", b"f6"]
    assert last == 6
    assert frames_after(ring, 6, 100) == ([], 6)


def test_lease_lapses_back_to_configured_interval() -> None:
    leases = IntervalLeases(1.0)
    leases.grant("coord", 0.1, ttl_s=600, now_mono_ns=0)
    assert leases.current_s(599 * 10**9) == 0.1
    assert leases.current_s(600 * 10**9) == 1.0  # lapsed: the coordinator did not renew


def test_lease_renewal_and_fastest_holder_wins() -> None:
    leases = IntervalLeases(1.0)
    leases.grant("a", 0.5, ttl_s=10, now_mono_ns=0)
    leases.grant("b", 0.1, ttl_s=5, now_mono_ns=0)
    assert leases.current_s(1) == 0.1
    assert leases.current_s(6 * 10**9) == 0.5  # b lapsed, a still holds
    leases.grant("a", 0.5, ttl_s=10, now_mono_ns=9 * 10**9)  # renewal extends
    assert leases.current_s(15 * 10**9) == 0.5
    assert leases.release("a") is True
    assert leases.current_s(15 * 10**9) == 1.0


@pytest.mark.parametrize(("interval", "ttl", "holder"), [(0.001, 10, "x"), (0.1, 0, "x"), (0.1, 10, "")])
def test_lease_validation(interval: float, ttl: float, holder: str) -> None:
    with pytest.raises(ValueError):
        IntervalLeases(1.0).grant(holder, interval, ttl, 0)


def test_a_lease_slower_than_configured_has_no_effect() -> None:
    leases = IntervalLeases(1.0)
    leases.grant("slow", 3600.0, ttl_s=600, now_mono_ns=0)
    assert leases.current_s(1) == 1.0  # held, shown, but sampling never slows down for it
    assert [lease.holder for lease in leases.active(1)] == ["slow"]
    leases.grant("fast", 0.1, ttl_s=600, now_mono_ns=0)
    assert leases.current_s(2) == 0.1


def test_leases_are_capped_one_per_holder_and_in_all() -> None:
    leases = IntervalLeases(1.0)
    for i in range(MAX_LEASES):
        leases.grant(f"h{i}", 0.5, ttl_s=10 + i, now_mono_ns=0)
    leases.grant("h0", 0.2, ttl_s=10, now_mono_ns=0)  # renewing replaces: no new slot needed
    assert leases.stored == MAX_LEASES and leases.current_s(1) == 0.2
    with pytest.raises(TooManyLeases, match=rf"{MAX_LEASES} leases are held") as refused:
        leases.grant("one-too-many", 0.1, ttl_s=10, now_mono_ns=10**9)
    assert refused.value.retry_after_s == 9.0  # when h0 lapses
    assert leases.stored == MAX_LEASES and leases.current_s(2) == 0.2  # the refusal changed nothing
    assert leases.release("h1") is True
    leases.grant("one-too-many", 0.1, ttl_s=10, now_mono_ns=10**9)


def test_lapsed_leases_are_deleted_so_memory_stays_bounded() -> None:
    leases = IntervalLeases(1.0)
    for i in range(MAX_LEASES):
        leases.grant(f"old{i}", 0.5, ttl_s=1, now_mono_ns=0)
    # no tick in between: the next grant deletes the lapsed ones before counting
    for i in range(MAX_LEASES):
        leases.grant(f"new{i}", 0.5, ttl_s=1, now_mono_ns=2 * 10**9)
    assert leases.stored == MAX_LEASES
    assert leases.current_s(4 * 10**9) == 1.0 and leases.stored == 0


def test_live_reads_never_decompress(monkeypatch: pytest.MonkeyPatch) -> None:
    import zlib

    ring = filled(1000, 300, block=128)  # blocks 1-128, 129-256 closed; head 257-300
    calls: list[int] = []
    real = zlib.decompress
    monkeypatch.setattr(zlib, "decompress", lambda data: calls.append(1) or real(data))
    assert ring.after(280, 10).frames == tuple(f"f{i}".encode() for i in range(281, 291))
    assert calls == []
    assert ring.after(250, 10).frames[0] == b"f251"
    assert calls == [1]


# ---- the hand-written sample encoder equals the generic one -------------------------------------------

_maybe_f = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))
_maybe_i = st.one_of(st.none(), st.integers(0, 2**62))
_text = st.text(min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    floats=st.lists(_maybe_f, min_size=9, max_size=9),
    ints=st.lists(_maybe_i, min_size=10, max_size=10),
    uuid=_text,
    node=_text,
    errors=st.lists(st.tuples(_text, _text), max_size=2),
    gpu_error=st.one_of(st.none(), _text),
    with_memory=st.booleans(),
)
def test_encode_sample_matches_generic_json(
    floats: list[float | None],
    ints: list[int | None],
    uuid: str,
    node: str,
    errors: list[tuple[str, str]],
    gpu_error: str | None,
    with_memory: bool,
) -> None:
    gpu = GpuReading(0, uuid, *floats[:7], ints[0], ints[1], floats[7], ints[2], ints[9], tuple(errors))
    memory = HostMemory(*ints[3:9]) if with_memory else None
    sample = Sample(
        seq=7,
        boot_id="b00t",
        node=node,
        t_wall_ns=1,
        t_mono_ns=2,
        read_duration_s=floats[8] or 0.0,
        interval_s=0.1,
        gpus=(gpu,),
        gpu_error=gpu_error,
        memory=memory,
        memory_error=None if with_memory else "OSError: gone",
        sensors=(SensorReading("sys_total", "system", floats[0], floats[1]),),
        status=(StatusReading("prochot", "hwmon:spbm", ints[3]),),
    )
    assert encode_sample(sample) == encode_frame(sample.to_json())


def test_items_appended_unencoded_are_encoded_once_when_read_or_sealed() -> None:
    calls: list[int] = []

    def encode(item: int) -> bytes:
        calls.append(item)
        return f'{{"seq":{item}}}'.encode()

    ring = SampleRing(100, block_frames=4, encode=encode)
    for seq in range(1, 4):
        ring.append(seq, seq)
    assert calls == []  # nothing encoded while nobody reads
    assert ring.after(1, 10).frames == (b'{"seq":2}', b'{"seq":3}')
    assert ring.after(0, 10).frames[0] == b'{"seq":1}'
    assert calls == [2, 3, 1]  # each once, however often read
    for seq in range(4, 10):
        ring.append(seq, seq)  # seq 4 seals the first block: it is encoded then, with the others
    assert ring.after(0, 100).frames == tuple(f'{{"seq":{n}}}'.encode() for n in range(1, 10))
    assert sorted(calls) == list(range(1, 10))
