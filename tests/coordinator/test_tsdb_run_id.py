"""A TSDB export's run id names the benchmark and the samples measured: the same engine, series, span and
windows give the same id (a re-export compares with the last); the remote-written series against the
scraped ones of the same agents are another measurement, with another id (a new user's trial found both
exports of one run called the same); the method (gate, scope, phases) is not in it, as `export --db`
keeps a stored run's id whatever it measures it with."""

from __future__ import annotations

import argparse

from sparkwatch.cli_parser import make_parser
from sparkwatch.commands.export_flags import check_tsdb_args
from sparkwatch.commands.export_tsdb import _run_id, _selection

BASE = ["export", "--prometheus", "http://127.0.0.1:9090", "run-1"]
SPAN = (1_800_000_000_000_000_000, 1_800_000_060_000_000_000)


def _args(argv: list[str]) -> argparse.Namespace:
    """The flags as `export` takes them: parsed, then checked (which gives the TSDB flags' defaults)."""
    parser = make_parser()
    args = parser.parse_args(argv)
    check_tsdb_args(args, parser)
    return args


def _id(*extra: str) -> str:
    args = _args([*BASE, *extra])
    return _run_id(args.prometheus, _selection(args), SPAN, args.run.encode())


def test_the_samples_chosen_are_in_the_id_and_the_method_is_not() -> None:
    same = _id()
    assert same == _id() and same.startswith("tsdb-") and len(same) == len("tsdb-") + 12
    chosen = [
        _id("--series-matchers", '{job=""}'),
        _id("--series-matchers", '{job!=""}'),
        _id("--metrics", "dcgm"),
        _id("--nodes-label", "instance"),
        _id("--nodes", "spark-1"),
        _id("--nodes", "spark-1,spark-2"),
    ]
    assert len({same, *chosen}) == 1 + len(chosen)
    assert _id("--gate-threshold", "0.3", "--scope", "decode", "--phases", "timed,warmup") == same
    assert _id("--nodes", "spark-2,spark-1") == _id("--nodes", "spark-1,spark-2")
    args = _args(BASE)
    assert _run_id(args.prometheus, _selection(args), (SPAN[0], SPAN[1] + 1), b"run-1") != same
    assert _run_id("http://127.0.0.1:8428", _selection(args), SPAN, b"run-1") != same
