"""The hostile suite's hypothesis settings: a small, reproducible CI profile and a large nightly one.

``python -m pytest`` (CI) runs every fuzz target with the ``fuzz-ci`` profile: a few dozen derandomized
examples each (the same inputs every run, so CI never flakes on a new random find), a few hundred in all.
``python -m pytest tests/fuzz --hypothesis-profile=nightly`` loads ``nightly`` through hypothesis's pytest
plugin: ``NIGHTLY_EXAMPLES`` random examples per target. The targets never put ``max_examples`` in their
own decorators (that would override the profile); :func:`fuzz_settings` picks the profile at decoration
time, after the plugin has loaded the one asked for (tests/fuzz/conftest.py registers both before that).

Every case is bounded in time twice: each HTTP request and each synchronous call runs under its own
timeout (``CASE_TIMEOUT_S``: a hang fails as a hang), and hypothesis's deadline is set, generously, above it.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from types import FrameType
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings

NIGHTLY = "nightly"
CI = "fuzz-ci"
NIGHTLY_EXAMPLES = 10_000
#: Examples per target in CI unless a target asks for fewer (``ci_examples``).
CI_EXAMPLES = 50
#: The longest one request or one synchronous call may take before the case counts as a hang.
CASE_TIMEOUT_S = 10.0
#: Hypothesis's own deadline per example (several requests each): set, but far above a normal case.
DEADLINE = timedelta(seconds=30)
#: pytest-timeout's limit for one fuzz target (the suite's 180 s is for tests of a few seconds): room for
#: hypothesis to shrink a failure in CI, and for 10 000 examples at night.
CI_TEST_TIMEOUT_S = 600
NIGHTLY_TEST_TIMEOUT_S = 6 * 3600

#: The fuzz targets share one server (a fixture) across their examples on purpose; generated bodies can be
#: large; a hostile JSON strategy filters now and then.
_SUPPRESSED = (
    HealthCheck.function_scoped_fixture,
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
    HealthCheck.filter_too_much,
)

settings.register_profile(
    CI,
    max_examples=CI_EXAMPLES,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),  # no explain: faster
    derandomize=True,
    deadline=DEADLINE,
    suppress_health_check=_SUPPRESSED,
    print_blob=True,
)
settings.register_profile(
    NIGHTLY,
    max_examples=NIGHTLY_EXAMPLES,
    derandomize=False,
    deadline=DEADLINE,
    suppress_health_check=_SUPPRESSED,
    print_blob=True,
)

F = TypeVar("F", bound=Callable[..., Any])


def nightly() -> bool:
    """Whether the nightly profile was asked for (``--hypothesis-profile=nightly``)."""
    return settings.get_current_profile_name() == NIGHTLY


def fuzz_profile(ci_examples: int | None = None, **overrides: Any) -> settings:
    """The settings of one fuzz target: the nightly profile when it is loaded, else ``fuzz-ci`` (with
    ``ci_examples`` examples if given). ``overrides`` never include ``max_examples``."""
    assert "max_examples" not in overrides, "the profile decides how many examples a target runs"
    if nightly():
        return settings(settings.get_profile(NIGHTLY), **overrides)
    examples = {} if ci_examples is None else {"max_examples": ci_examples}
    return settings(settings.get_profile(CI), **examples, **overrides)


def fuzz_settings(ci_examples: int | None = None, **overrides: Any) -> Callable[[F], F]:
    """:func:`fuzz_profile` as a decorator for a ``@given`` test."""
    chosen = fuzz_profile(ci_examples, **overrides)

    def apply(test: F) -> F:
        return chosen(test)

    return apply


class Hang(BaseException):
    """A synchronous call ran past ``CASE_TIMEOUT_S``. A BaseException, so that no ``except Exception`` in
    the code under test can swallow it."""


@contextlib.contextmanager
def bounded(seconds: float = CASE_TIMEOUT_S) -> Iterator[None]:
    """Raise :class:`Hang` in this (main) thread if the block runs longer than ``seconds``. An outer timer
    on the same signal (pytest-timeout's) is put back afterwards with what is left of it."""

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise Hang(f"the call did not return within {seconds} s")

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire)
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay > 0:
            left = outer_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), outer_interval)
