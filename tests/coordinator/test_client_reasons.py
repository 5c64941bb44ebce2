"""Why the CLI could not reach a coordinator, in the words that help: the system's reason for a refused
connection (aiohttp's own text says ``ssl:default`` of plain http too), the resolver's for a name that does
not resolve, and the TLS library's for a certificate that fails."""

from __future__ import annotations

import socket
import ssl

import aiohttp
from aiohttp.client_reqrep import ConnectionKey

from sparkwatch.client import _why

#: A connection key as aiohttp builds one (only its host and port are printed).
KEY = ConnectionKey(*(["coordinator.example", 8750] + [None] * (len(ConnectionKey._fields) - 2)))


def test_a_refused_connection_is_the_systems_reason() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 8750)")
    assert _why(aiohttp.ClientConnectorError(KEY, refused)) == "Connection refused"


def test_a_name_that_does_not_resolve_is_the_resolvers_reason() -> None:
    unresolved = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert _why(aiohttp.ClientConnectorError(KEY, unresolved)) == "Name or service not known"


def test_a_certificate_that_fails_names_its_cause() -> None:
    failed = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    said = _why(aiohttp.ClientConnectorCertificateError(KEY, failed))
    assert "CERTIFICATE_VERIFY_FAILED" in said and "Operation not permitted" not in said
