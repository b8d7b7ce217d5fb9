"""A wrong archive URL fails fast and says what to check (issue #41): a refused connection,
an unknown host or ``https://`` against a plain server is given up after two attempts at
connecting (not the whole backoff: 10-13 s of silence before), each retry is said, and a
``ZARRCHIVE_URL`` ending in ``/api`` (as DANDI's server info names the API) is the archive's."""

from __future__ import annotations

import time

import httpx
import pytest
from typer.testing import CliRunner

from tests.conftest import LiveServer
from zarrchive.cli import app
from zarrchive.client.address import archive_root
from zarrchive.client.api import UNREACHED_CONNECT_ATTEMPTS, ApiClient
from zarrchive.errors import InvalidInput, NetworkError
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import free_port
from zarrchive.transport import RetryEvent, RetryPolicy

#: Generous: the failure takes a connection refused twice and one backoff of at most 0.5 s
#: (the full policy of 6 attempts waited about 10 s); the bound only tells the two apart.
FAST = 5.0


def attempt(url: str) -> tuple[NetworkError, list[RetryEvent], float]:
    events: list[RetryEvent] = []
    started = time.monotonic()
    client = ApiClient(url, retry=RetryPolicy(attempts=6), on_retry=events.append)
    with client, pytest.raises(NetworkError) as caught:
        client.info()
    return caught.value, events, time.monotonic() - started


def test_a_refused_connection_fails_within_seconds_saying_what_to_check() -> None:
    error, events, took = attempt(f"http://127.0.0.1:{free_port()}")
    assert len(events) == UNREACHED_CONNECT_ATTEMPTS - 1 == 1  # one quick retry, said
    assert took < FAST, took
    assert "Connection refused" in error.message
    assert "is the archive running, and are ZARRCHIVE_URL or --api-url right?" in error.message


def test_https_against_a_plain_server_says_so(live_server: LiveServer, archive: Archive) -> None:
    live_server.app.state.archive = archive
    error, events, took = attempt(live_server.url.replace("http://", "https://"))
    assert len(events) == 1 and took < FAST, (events, took)
    assert "is the archive served over plain http://?" in error.message


def test_an_archive_once_reached_gets_every_attempt() -> None:
    client = ApiClient("http://127.0.0.1:1")
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    assert client._give_up(refused, UNREACHED_CONNECT_ATTEMPTS)
    assert not client._give_up(refused, UNREACHED_CONNECT_ATTEMPTS - 1)
    assert not client._give_up(httpx.ConnectTimeout("timed out"), UNREACHED_CONNECT_ATTEMPTS)
    client._reached = True  # it answered once: a refused connection now is a passing fault
    assert not client._give_up(refused, UNREACHED_CONNECT_ATTEMPTS)
    client.close()


def test_the_cli_says_the_retry_then_the_error() -> None:
    result = CliRunner().invoke(
        app,
        ["verify", "00000000-0000-0000-0000-000000000000", "."],
        env={"ZARRCHIVE_URL": f"http://127.0.0.1:{free_port()}", "ZARRCHIVE_TOKEN": ""},
    )
    assert result.exit_code == 2
    retry, error = result.stderr.splitlines()
    assert retry.startswith("zarrchive: GET /api/") and "; retrying in " in retry
    assert error.startswith("zarrchive verify: cannot reach the archive at http://127.0.0.1:")


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("https://dandi.example", "https://dandi.example"),
        ("https://dandi.example/", "https://dandi.example"),
        ("https://dandi.example/api", "https://dandi.example"),
        ("https://dandi.example/api/", "https://dandi.example"),
        (" http://127.0.0.1:8000/api ", "http://127.0.0.1:8000"),
        ("https://host/archive/api", "https://host/archive"),
        ("https://host/apis", "https://host/apis"),
    ],
)
def test_the_archive_root_of_what_users_give(given: str, root: str) -> None:
    assert archive_root(given) == root


def test_an_address_that_is_not_http_is_refused() -> None:
    with pytest.raises(InvalidInput, match="must start with http:// or https://"):
        archive_root("127.0.0.1:8000")


def test_a_url_ending_in_api_reaches_the_archive(live_server: LiveServer, archive: Archive) -> None:
    live_server.app.state.archive = archive
    with ApiClient(live_server.url + "/api/") as client:
        assert client.info().bucket  # was "not found: Not Found"
        assert client.url == live_server.url
