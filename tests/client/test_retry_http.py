"""Every HTTP call site of the client, against a real server that answers 503 with
``Retry-After: 1`` first: the call waits the second, retries, and succeeds.

The server is :class:`~tests.helpers.flaky_proxy.FlakyProxy`, a reverse proxy in front of
the live API, SeaweedFS's S3 or the range server (no mocked transport).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.helpers.flaky_proxy import FlakyProxy, Hit
from tests.helpers.lindi import range_server_process
from zarrchive.client import ApiClient, Downloader, RetryEvent, Uploader
from zarrchive.client.api import OpenedBatch
from zarrchive.client.readers import HttpObjectReader
from zarrchive.client.store import ZarrchiveStore
from zarrchive.client.upload import BatchRecords
from zarrchive.lindi import RangeReader
from zarrchive.transport import USER_AGENT, RetryPolicy

DATA = np.arange(12, dtype="<i4")
#: A policy whose own backoff is far shorter than the server's Retry-After.
QUICK = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01)


@pytest.fixture
def proxies() -> Iterator[list[FlakyProxy]]:
    made: list[FlakyProxy] = []
    yield made
    for proxy in made:
        proxy.close()


def _proxy(made: list[FlakyProxy], upstream: str, fails: Callable[[str, str], bool]) -> FlakyProxy:
    proxy = FlakyProxy(upstream, fails=fails)
    made.append(proxy)
    return proxy


def _small_zarr(path: Path) -> None:
    array = zarr.create_array(path, shape=(12,), chunks=(4,), dtype="<i4")
    array[...] = DATA


def _waited_then_succeeded(hits: Sequence[Hit], success: int = 200) -> None:
    """A 503, then, at least the Retry-After second later, the success (all ours; zarr may
    read a document again, from its success on)."""
    statuses = [h.status for h in hits]
    assert statuses[:2] == [503, success] and set(statuses[2:]) <= {success}, statuses
    assert 1.0 <= hits[1].time - hits[0].time < 5.0, hits
    assert {h.user_agent for h in hits} == {USER_AGENT}


class UploadsThrough(ApiClient):
    """An API client whose presigned PUT URLs go through *proxy* (in front of S3)."""

    def __init__(self, proxy: FlakyProxy, url: str, token: str | None) -> None:
        super().__init__(url, token, retry=QUICK)
        self.proxy = proxy

    def open_upload(
        self,
        zarr_id: str,
        files: Sequence[tuple[str, str, int | None]],
        *,
        resume: bool = False,
        after: str | None = None,
    ) -> OpenedBatch:
        opened = super().open_upload(zarr_id, files, resume=resume, after=after)
        targets = {
            path: replace(t, url=self.proxy.rewrite(t.url)) if t.url else t
            for path, t in opened.targets.items()
        }
        return replace(opened, targets=targets)


def _upload(client: ApiClient, records: BatchRecords, dandiset: str, source: Path) -> str:
    result = Uploader(client, jobs=2, records=records).upload(source, dandiset=dandiset)
    assert result.ok and result.zarr_id
    return result.zarr_id


def test_api_requests_honour_retry_after(
    client: ApiClient, client_env: dict[str, str], proxies: list[FlakyProxy]
) -> None:
    proxy = _proxy(proxies, client_env["ZARRCHIVE_URL"], lambda m, p: p == "/api/info/")
    events: list[RetryEvent] = []
    with ApiClient(proxy.url, client.token, retry=QUICK, on_retry=events.append) as through:
        assert through.info().max_batch_files == client.info().max_batch_files
    _waited_then_succeeded(proxy.hits_of("GET", "/api/info/"))
    assert [(e.attempt, e.status, e.wait) for e in events] == [(1, 503, 1.0)]


def test_upload_puts_honour_retry_after(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    records: BatchRecords,
    proxies: list[FlakyProxy],
) -> None:
    s3 = client.info().s3_endpoint_url
    assert s3 is not None
    proxy = _proxy(proxies, s3, lambda m, p: m == "PUT" and p.endswith("/c/1"))
    source = tmp_path / "put.zarr"
    _small_zarr(source)
    with UploadsThrough(proxy, client_env["ZARRCHIVE_URL"], client.token) as through:
        zarr_id = _upload(through, records, dandiset, source)
    [path] = {h.path for h in proxy.hits if h.path.endswith("/c/1")}
    _waited_then_succeeded(proxy.hits_of("PUT", path))
    assert f"/zarr-staging/{zarr_id}/" in path  # the batch's staging key
    stored = client.get_file(zarr_id, "c/1")
    assert stored is not None
    assert stored.md5 == hashlib.md5((source / "c" / "1").read_bytes()).hexdigest()


def test_downloads_honour_retry_after(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    proxies: list[FlakyProxy],
) -> None:
    source = tmp_path / "get.zarr"
    _small_zarr(source)
    zarr_id = _upload(client, records, dandiset, source)
    info = client.get_zarr(zarr_id)
    s3 = client.info().s3_endpoint_url
    assert s3 is not None
    proxy = _proxy(proxies, s3, lambda m, p: m == "GET" and p.endswith("/c/2"))
    dest = tmp_path / "copy.zarr"
    with Downloader(client, jobs=2) as downloader:
        result = downloader.download(replace(info, s3_url=proxy.rewrite(info.s3_url)), dest)
    assert result.ok and result.downloaded == info.file_count
    assert (dest / "c" / "2").read_bytes() == (source / "c" / "2").read_bytes()
    [path] = {h.path for h in proxy.hits if h.path.endswith("/c/2")}
    _waited_then_succeeded(proxy.hits_of("GET", path))


def test_store_reads_honour_retry_after(
    tmp_path: Path,
    client: ApiClient,
    dandiset: str,
    records: BatchRecords,
    proxies: list[FlakyProxy],
) -> None:
    source = tmp_path / "read.zarr"
    _small_zarr(source)
    info = client.get_zarr(_upload(client, records, dandiset, source))
    s3 = client.info().s3_endpoint_url
    assert s3 is not None
    proxy = _proxy(proxies, s3, lambda m, p: p.endswith(("/zarr.json", "/c/0")))
    reader = HttpObjectReader(proxy.rewrite(info.s3_url), retry=QUICK)
    with ZarrchiveStore(reader) as store:
        assert store.reader is reader
        np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], DATA)
    paths = sorted({h.path for h in proxy.hits if h.status == 503})
    assert [p.rpartition(info.zarr_id)[2] for p in paths] == ["/c/0", "/zarr.json"]
    for path in paths:
        _waited_then_succeeded(proxy.hits_of("GET", path))


def test_lindi_range_reads_honour_retry_after(tmp_path: Path, proxies: list[FlakyProxy]) -> None:
    payload = bytes(range(256)) * 4
    (tmp_path / "data.bin").write_bytes(payload)
    with range_server_process(tmp_path, tmp_path / "range.log") as server:
        proxy = _proxy(proxies, server.base_url, lambda m, p: p == "/data.bin")
        reader = RangeReader(retry=QUICK)
        assert reader.read(proxy.url + "/data.bin", 100, 50) == payload[100:150]
    _waited_then_succeeded(proxy.hits_of("GET", "/data.bin"), success=206)
