"""The hostile suite's fixtures. Importing ``fuzz.profiles`` registers the ``fuzz-ci`` and ``nightly``
hypothesis profiles: this conftest is loaded before hypothesis's pytest plugin loads the profile that
``--hypothesis-profile`` names (when pytest is pointed at tests/fuzz, as the nightly command is)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from fuzz import profiles
from fuzz.coord_harness import TOKEN, CoordinatorApi


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each fuzz target gets the time its profile needs (see fuzz/profiles.py), not the suite's 180 s."""
    here = pathlib.Path(__file__).parent
    limit = profiles.NIGHTLY_TEST_TIMEOUT_S if profiles.nightly() else profiles.CI_TEST_TIMEOUT_S
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.timeout(limit))


@pytest.fixture
def coordinator_api(tmp_path: pathlib.Path) -> Iterator[CoordinatorApi]:
    """A coordinator without a token, shared by every example of the test (state accumulates, as on a
    real server)."""
    api = CoordinatorApi(tmp_path / "fuzz.db")
    yield api
    api.close()


@pytest.fixture
def secured_api(tmp_path: pathlib.Path) -> Iterator[CoordinatorApi]:
    """The same with a bearer token."""
    api = CoordinatorApi(tmp_path / "fuzz.db", token=TOKEN)
    yield api
    api.close()
