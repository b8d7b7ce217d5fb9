"""The API client's retries (against a real local HTTP server) and error messages."""

from __future__ import annotations

import email.utils
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from zarrchive.client import ApiClient, RetryEvent, RetryPolicy, Uploader
from zarrchive.client.api import AssetInfo, DandisetInfo, FileInfo, parse_retry_after
from zarrchive.client.records import BatchRecords
from zarrchive.errors import ApiError, NetworkError

INFO = {"version": "1", "s3_endpoint_url": None, "bucket": "b", "max_batch_files": 7}


class Scripted:
    """A real HTTP server answering a scripted list of (status, headers, body)."""

    def __init__(self, answers: list[tuple[int, dict[str, str], object]]) -> None:
        self.answers = answers
        self.times: list[float] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.times.append(time.monotonic())
                status, headers, body = outer.answers.pop(0)
                data = json.dumps(body).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted() -> Iterator[list[Scripted]]:
    made: list[Scripted] = []
    yield made
    for server in made:
        server.close()


def test_retry_after_is_honoured(scripted: list[Scripted]) -> None:
    server = Scripted([(503, {"Retry-After": "1"}, {"detail": "busy"}), (200, {}, INFO)])
    scripted.append(server)
    events: list[RetryEvent] = []
    policy = RetryPolicy(attempts=3, base_delay=0.01)
    with ApiClient(server.url, retry=policy, on_retry=events.append) as client:
        assert client.info().max_batch_files == 7
    assert [(e.attempt, e.status) for e in events] == [(1, 503)]
    assert len(server.times) == 2
    assert 1.0 <= server.times[1] - server.times[0] < 2.0


def test_an_error_says_whether_its_request_was_retried(scripted: list[Scripted]) -> None:
    # a 404 after a retry may answer our own first attempt, which went through (its answer
    # lost): the error says so, for the caller (re-completing a batch) to tell
    server = Scripted(
        [
            (503, {}, {"detail": "busy"}),
            (404, {}, {"detail": "gone"}),
            (404, {}, {"detail": "gone"}),
        ]
    )
    scripted.append(server)
    with ApiClient(server.url, retry=RetryPolicy(attempts=3, base_delay=0.01)) as client:
        with pytest.raises(ApiError) as after_a_retry:
            client.info()
        with pytest.raises(ApiError) as at_once:
            client.info()
    assert (after_a_retry.value.status_code, after_a_retry.value.retried) == (404, True)
    assert (at_once.value.status_code, at_once.value.retried) == (404, False)


def test_the_server_info_says_what_publishing_does_to_zarrs(scripted: list[Scripted]) -> None:
    server = Scripted([(200, {}, {**INFO, "published_zarrs": "snapshot"})])
    scripted.append(server)
    with ApiClient(server.url) as client:
        assert client.info().published_zarrs == "snapshot"
        assert client.info().published_zarrs == "snapshot"  # cached: one request
    assert len(server.times) == 1
    older = Scripted([(200, {}, INFO)])  # an archive that does not say
    scripted.append(older)
    with ApiClient(older.url) as client:
        assert client.info().published_zarrs == "freeze"


def test_answers_are_typed(
    tmp_path: Path, client: ApiClient, records: BatchRecords, dandiset: str
) -> None:
    assert client.get_dandiset(dandiset) == DandisetInfo(dandiset, "client tests", "OPEN", False)
    assert not client.is_private(dandiset)
    zarr = client.create_zarr("typed.zarr", dandiset)
    opened = client.open_upload(zarr.zarr_id, [("a/b", "0" * 32, 1)])
    assert opened.uid and set(opened.targets) == {"a/b"}
    assert opened.targets["a/b"].url and not opened.targets["a/b"].in_parts
    client.cancel_upload(zarr.zarr_id)
    assert client.find_asset(dandiset, "typed.zarr") is None
    assert client.get_file(zarr.zarr_id, "a/b") is None
    local = tmp_path / "typed.zarr"
    (local / "a").mkdir(parents=True)
    (local / "a" / "b").write_bytes(b"b")
    result = Uploader(client, records=records).upload(local, dandiset=dandiset)
    assert result.ok and result.asset_created
    found = client.find_asset(dandiset, "typed.zarr")
    assert isinstance(found, AssetInfo) and found.asset_id == result.asset_id
    assert (found.path, found.zarr_id, found.size) == ("typed.zarr", zarr.zarr_id, 1)
    assert found.metadata  # asked for with the listing
    stored = client.get_file(zarr.zarr_id, "a/b")
    assert isinstance(stored, FileInfo)
    assert (stored.path, stored.md5, stored.size) == ("a/b", hashlib.md5(b"b").hexdigest(), 1)


def test_429_with_an_http_date_then_give_up_on_5xx(scripted: list[Scripted]) -> None:
    soon = email.utils.formatdate(time.time() + 2, usegmt=True)
    server = Scripted(
        [
            (429, {"Retry-After": soon}, {"detail": "slow down"}),
            (500, {}, {"detail": "broken"}),
            (502, {}, {"detail": "still broken"}),
        ]
    )
    scripted.append(server)
    with (
        ApiClient(server.url, retry=RetryPolicy(attempts=3, base_delay=0.01)) as client,
        pytest.raises(ApiError) as caught,
    ):
        client.info()
    assert caught.value.status_code == 502
    assert caught.value.message == "the archive answered 502 to GET /api/info/: still broken"
    assert len(server.times) == 3
    assert 0.9 <= server.times[1] - server.times[0] < 2.5  # the date has one-second precision
    assert server.times[2] - server.times[1] < 0.5  # backoff, not a Retry-After


def test_connection_errors_are_retried_then_reported() -> None:
    from zarrchive.storage.seaweedfs import free_port

    policy = RetryPolicy(attempts=3, base_delay=0.1)
    start = time.monotonic()
    with (
        ApiClient(f"http://127.0.0.1:{free_port()}", retry=policy) as client,
        pytest.raises(NetworkError) as caught,
    ):
        client.info()
    assert caught.value.message.startswith("cannot reach the archive at http://127.0.0.1:")
    # an archive never reached is given up after 2 connection attempts (one wait, >= 0.05 s;
    # once it has answered, every attempt of the policy is used: test_unreached_archive.py)
    assert time.monotonic() - start >= 0.05


def test_backoff_bounds() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=4.0, max_retry_after=60)
    for attempt, ceiling in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)):
        for _ in range(20):
            assert ceiling / 2 <= policy.delay(attempt) <= ceiling
    assert policy.delay(1, retry_after=7) == 7
    assert policy.delay(1, retry_after=600) == 60
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_friendly_errors(client: ApiClient, dandiset: str) -> None:
    with pytest.raises(ApiError) as caught:
        client.get_zarr("00000000-0000-0000-0000-000000000000")
    assert caught.value.status_code == 404
    assert caught.value.message == "not found: no Zarr 00000000-0000-0000-0000-000000000000"
    zarr = client.create_zarr("x.zarr", dandiset)
    client.start_upload(zarr.zarr_id, [("a", "0" * 32)])
    with pytest.raises(ApiError) as conflict:
        client.start_upload(zarr.zarr_id, [("a", "0" * 32)])
    assert conflict.value.status_code == 409
    assert conflict.value.message.startswith(f"conflict: Zarr {zarr.zarr_id} already has")
    assert client.upload_in_progress(zarr.zarr_id)
    client.cancel_upload(zarr.zarr_id)
    assert not client.upload_in_progress(zarr.zarr_id)
    with ApiClient(client.url, "wrong") as wrong, pytest.raises(ApiError) as bad:
        wrong.find_zarr(dandiset, "x.zarr")
    assert bad.value.status_code == 401
    assert bad.value.message.startswith("the archive refused the credentials: ")
