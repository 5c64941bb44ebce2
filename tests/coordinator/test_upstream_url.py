"""The proxy's upstream URL: each request's path is appended to it, and the client's Authorization header
is forwarded as sent, so a query, a fragment or credentials in it broke every request."""

from __future__ import annotations

import argparse

import pytest

from sparkwatch.cli_types import upstream_url


@pytest.mark.parametrize("url", ["http://h:30000", "https://h/openai/", "http://127.0.0.1:8000/v1"])
def test_an_upstream_with_a_host_and_a_path_is_taken_as_given(url: str) -> None:
    assert upstream_url(url) == url


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://u:key@h:1", "credentials do not belong in the upstream URL"),
        ("http://:key@h:1", "credentials do not belong in the upstream URL"),
        ("http://h:1/?key=k", "no query or fragment (each request's path and query are appended to it): give 'http://h:1/'"),
        ("http://h:1/base#x", "give 'http://h:1/base'"),
        ("http://h:1/?", "no query or fragment"),
        ("ftp://h:1", "must be an http:// or https:// URL"),
    ],
)  # fmt: skip
def test_an_upstream_that_would_break_every_request_is_refused(url: str, said: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        upstream_url(url)
    assert said in str(caught.value) and "key=k" not in str(caught.value)
