"""Start-up time of the `sparkwatch` command line: `--version`, `--help` and a subcommand's `--help`, each
beside the floor that no Python CLI can beat, `python -c pass`, measured interleaved in the same run (the
machine is shared and noisy: medians, and each figure minus the floor). Goal: `--version` and `--help` in
under 0.3 s.

    python benchmarks/cli_startup.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sparkwatch.store import Store

#: A coordinator's database with no run in it, for `export --db` (its refusal of the run comes after the file
#: was opened and read: every import of an offline export but the export's own computation).
EMPTY_DB = Path(tempfile.mkdtemp(prefix="cli-startup-")) / "c.db"

CASES = {
    "floor: python -c pass": [sys.executable, "-c", "pass"],
    "sparkwatch --version": [sys.executable, "-m", "sparkwatch", "--version"],
    "sparkwatch --help": [sys.executable, "-m", "sparkwatch", "--help"],
    "sparkwatch run --help": [sys.executable, "-m", "sparkwatch", "run", "--help"],
    "sparkwatch schema (imports the stack)": [sys.executable, "-m", "sparkwatch", "schema"],
    # exit 2 (no command given): `run`'s flags are checked before the embedded coordinator is imported
    "sparkwatch run, refused": [sys.executable, "-m", "sparkwatch", "run", "--nodes", "n.toml"],
    # exit 2 (no such nodes file): said before the embedded coordinator's stack is imported to read it
    "sparkwatch run, nodes file missing": [
        *(sys.executable, "-m", "sparkwatch", "run", "--nodes", str(EMPTY_DB.with_name("none.toml"))),
        *("--", "true"),
    ],
    # exit 2 (nothing listens on port 9): what a script's `runs mark` per request costs before it is sent
    "sparkwatch runs mark, unreachable": [
        *(sys.executable, "-m", "sparkwatch", "runs", "mark", "r", "m", "begin"),
        *("--coordinator", "http://127.0.0.1:9"),
    ],
    "sparkwatch export --db, no such run": [
        *(sys.executable, "-m", "sparkwatch", "export", "--db", str(EMPTY_DB), "r"),
    ],
}
#: The cases that exit non-zero by design, and their exit code.
EXIT_CODES = {
    "sparkwatch run, refused": 2,
    "sparkwatch run, nodes file missing": 2,
    "sparkwatch runs mark, unreachable": 2,
    "sparkwatch export --db, no such run": 2,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    Store(EMPTY_DB).close()
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.rounds):
        for name, argv in CASES.items():  # interleaved: every case sees the same noise
            t0 = time.perf_counter()
            done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if done.returncode != EXIT_CODES.get(name, 0):
                raise SystemExit(f"{name}: exit {done.returncode}")
            times[name].append(time.perf_counter() - t0)
    floor = statistics.median(times["floor: python -c pass"])
    print(f"{'case':<40} {'median s':>9} {'p90 s':>7} {'minus floor s':>14}")
    for name, samples in times.items():
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"{name:<40} {median:>9.3f} {p90:>7.3f} {median - floor:>14.3f}")


if __name__ == "__main__":
    main()
