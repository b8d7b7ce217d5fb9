"""Issue 39 item 3: big files come in parallel ranged GETs written in place, checked by
md5, resumed part by part after an interruption; the md5s a download checked go to the
digest cache (the next run stats the files instead of reading them).

The GETs go through urllib3 (:class:`~zarrchive.transport.BodyReader`) with the transport's
rules: ``Retry-After`` honoured, the user agent sent, a transfer cut mid-body retried, and
an environment's proxy used (through httpx)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.helpers.cutting_proxy import CuttingProxy
from tests.helpers.flaky_proxy import FlakyProxy
from tests.helpers.forward_proxy import forward_proxy
from tests.helpers.local_zarr import upload_files, zarr_checksum_of
from tests.helpers.range_fetchers import CountingFetcher
from zarrchive.client import ApiClient, RetryEvent
from zarrchive.client.api import ZarrInfo
from zarrchive.client.download import PARTIAL_SUFFIX, PARTS_SUFFIX, Downloader
from zarrchive.client.local import digest_cache
from zarrchive.client.upload import BatchRecords
from zarrchive.errors import TransferError
from zarrchive.storage.seaweedfs import free_port
from zarrchive.transport import RETRY_EXCEPTIONS, USER_AGENT, BodyReader, RetryPolicy

BIG_FILE, PART = 4000, 1500  # a "big" file of 10,000 bytes: 7 parts
BIG = bytes((i * 7 + i // 251) % 256 for i in range(10_000))
SMALL = {".zgroup": b'{"zarr_format": 2}', "arr/.zarray": b"{}", "arr/1": b"one" * 300}


@pytest.fixture
def zarr_id(tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords) -> str:
    return upload_files(
        client, records, dandiset, tmp_path / "source.zarr", {**SMALL, "arr/0": BIG}
    )


def downloader(client: ApiClient, fetcher: CountingFetcher, jobs: int = 3) -> Downloader:
    return Downloader(client, jobs=jobs, fetcher=fetcher, big_file=BIG_FILE, part_size=PART)


def parts_done(dest: Path) -> list[int]:
    record = dest / "arr" / ("0" + PARTIAL_SUFFIX + PARTS_SUFFIX)
    return list(json.loads(record.read_text())["done"]) if record.exists() else []


def test_big_file_in_ranged_parts(tmp_path: Path, client: ApiClient, zarr_id: str) -> None:
    fetcher = CountingFetcher()
    dest = tmp_path / "dest"
    with downloader(client, fetcher) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and result.downloaded == 4
    assert (dest / "arr" / "0").read_bytes() == BIG
    assert sorted(s for p, s, _ in fetcher.ranges if p == "arr/0") == list(range(0, 10_000, PART))
    assert fetcher.whole == 3  # the small files: one GET each
    assert not list(dest.rglob("*" + PARTIAL_SUFFIX + "*"))


def test_interrupted_big_file_resumes_with_the_missing_parts(
    tmp_path: Path, client: ApiClient, zarr_id: str
) -> None:
    dest = tmp_path / "dest"
    last = 6 * PART
    # One part at a time: every part before the refused last one is finished and recorded.
    with (
        downloader(client, CountingFetcher(fail_at=last), jobs=1) as d,
        pytest.raises(TransferError, match="refused range"),
    ):
        d.download(zarr_id, dest)
    assert parts_done(dest) == [0, 1, 2, 3, 4, 5]
    fetcher = CountingFetcher()
    with downloader(client, fetcher) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and (dest / "arr" / "0").read_bytes() == BIG
    assert [(s, e) for p, s, e in fetcher.ranges if p == "arr/0"] == [(last, 10_000)]
    assert zarr_checksum_of(dest) == client.get_zarr(zarr_id).checksum
    assert not list(dest.rglob("*" + PARTIAL_SUFFIX + "*"))


def test_a_wrong_resumed_part_is_found_by_the_md5_and_the_file_fetched_again(
    tmp_path: Path, client: ApiClient, zarr_id: str
) -> None:
    dest = tmp_path / "dest"
    with (
        downloader(client, CountingFetcher(fail_at=6 * PART), jobs=1) as d,
        pytest.raises(TransferError),
    ):
        d.download(zarr_id, dest)
    partial = dest / "arr" / ("0" + PARTIAL_SUFFIX)
    with open(partial, "r+b") as out:  # a recorded part's bytes damaged
        out.seek(PART + 10)
        out.write(b"damage")
    fetcher = CountingFetcher()
    with downloader(client, fetcher) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and (dest / "arr" / "0").read_bytes() == BIG
    starts = sorted(s for p, s, _ in fetcher.ranges if p == "arr/0")
    assert starts == sorted([6 * PART, *range(0, 10_000, PART)])  # the last, then all again


def test_a_stale_partial_of_other_content_is_not_resumed(
    tmp_path: Path, client: ApiClient, zarr_id: str
) -> None:
    dest = tmp_path / "dest"
    (dest / "arr").mkdir(parents=True)
    partial = dest / "arr" / ("0" + PARTIAL_SUFFIX)
    partial.write_bytes(bytes(10_000))
    record = {"md5": "0" * 32, "size": 10_000, "part_size": PART, "done": [0, 1, 2, 3, 4, 5, 6]}
    (dest / "arr" / ("0" + PARTIAL_SUFFIX + PARTS_SUFFIX)).write_text(json.dumps(record))
    fetcher = CountingFetcher()
    with downloader(client, fetcher) as d:
        result = d.download(zarr_id, dest)
    assert result.ok and (dest / "arr" / "0").read_bytes() == BIG
    assert len([s for p, s, _ in fetcher.ranges if p == "arr/0"]) == 7


def test_checked_md5s_go_to_the_digest_cache(
    tmp_path: Path, client: ApiClient, zarr_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files just written are not settled; a clock 10 s ahead makes them so (the cache
    # keeps no file changed within the last 3 s).
    ahead = 10 * 10**9
    monkeypatch.setattr(digest_cache, "now_ns", lambda: time.time_ns() + ahead)
    dest = tmp_path / "dest"
    with downloader(client, CountingFetcher()) as d:
        assert d.download(zarr_id, dest).ok
    cache = digest_cache.default_cache()
    assert cache is not None
    known = cache.known(str(dest / "arr"), time.time_ns() + 2 * ahead)
    cached = {name: (record, md5) for name, record, md5 in known.items()}
    for name, content in {"0": BIG, "1": SMALL["arr/1"]}.items():
        st = os.stat(dest / "arr" / name)
        record, md5 = cached[name]
        assert record == tuple(digest_cache.stat_key(st))
        assert md5 == hashlib.md5(content).hexdigest()


# -- the GETs' transport ------------------------------------------------------------------
#: A policy whose own backoff is far shorter than the server's Retry-After.
QUICK = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.01)


def through(client: ApiClient, zarr_id: str, url: str) -> ZarrInfo:
    """The Zarr's description with its objects' URLs on the proxy at *url*."""
    info = client.get_zarr(zarr_id)
    s3 = urlsplit(info.s3_url)
    return replace(info, s3_url=s3._replace(netloc=urlsplit(url).netloc).geturl())


@pytest.fixture
def s3_url(client: ApiClient) -> str:
    url = client.info().s3_endpoint_url
    assert url is not None
    return url


@pytest.fixture
def cutting() -> Iterator[list[CuttingProxy]]:
    made: list[CuttingProxy] = []
    yield made
    for proxy in made:
        proxy.close()


def test_ranged_gets_honour_retry_after_and_send_the_user_agent(
    tmp_path: Path, client: ApiClient, zarr_id: str, s3_url: str
) -> None:
    proxy = FlakyProxy(
        s3_url, fails=lambda method, path: method == "GET" and path.endswith("/arr/0")
    )
    events: list[RetryEvent] = []
    try:
        dest = tmp_path / "dest"
        with Downloader(
            client, jobs=1, big_file=BIG_FILE, part_size=PART, retry=QUICK, on_retry=events.append
        ) as d:
            result = d.download(through(client, zarr_id, proxy.url), dest)
        # (the big file's HEAD, asking for S3's CRC32, is not counted)
        hits = [h for h in proxy.hits if h.path.endswith("/arr/0") and h.method == "GET"]
    finally:
        proxy.close()
    assert result.ok and (dest / "arr" / "0").read_bytes() == BIG
    assert [h.status for h in hits] == [503] + [206] * 7  # one part at a time
    assert 1.0 <= hits[1].time - hits[0].time < 5.0  # the server's second, not QUICK's
    assert {h.user_agent for h in proxy.hits} == {USER_AGENT}
    assert [(e.attempt, e.status, e.wait) for e in events] == [(1, 503, 1.0)]


@pytest.mark.parametrize("ranged", [True, False], ids=["part", "small-file"])
def test_a_get_cut_mid_body_is_retried_and_the_copy_exact(
    tmp_path: Path,
    client: ApiClient,
    zarr_id: str,
    s3_url: str,
    cutting: list[CuttingProxy],
    ranged: bool,
) -> None:
    name = "/arr/0" if ranged else "/arr/1"
    proxy = CuttingProxy(
        s3_url, cut=lambda path, wanted: path.endswith(name) and (wanted is not None) == ranged
    )
    cutting.append(proxy)
    events: list[RetryEvent] = []
    dest = tmp_path / "dest"
    with Downloader(
        client, jobs=2, big_file=BIG_FILE, part_size=PART, retry=QUICK, on_retry=events.append
    ) as d:
        result = d.download(through(client, zarr_id, proxy.url), dest)
    assert result.ok and zarr_checksum_of(dest) == client.get_zarr(zarr_id).checksum
    assert (dest / "arr" / "0").read_bytes() == BIG
    [(path, wanted)] = proxy.cut_hits()
    assert [h for h in proxy.hits if (h[0], h[1]) == (path, wanted)] == [
        (path, wanted, True),
        (path, wanted, False),
    ]
    assert len(events) == 1 and events[0].status is None  # a transport failure, retried


def test_ranged_gets_go_through_the_environment_proxy(
    tmp_path: Path, client: ApiClient, zarr_id: str, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if "proxy" in k.lower()]:
        monkeypatch.delenv(key)
    with forward_proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        dest = tmp_path / "dest"
        with Downloader(client, jobs=2, big_file=BIG_FILE, part_size=PART) as d:
            assert d.download(zarr_id, dest).ok
        s3_host = urlsplit(s3_url).netloc
        # 7 parts and 3 small files, every one through the proxy
        assert proxy.requests().count(("GET", s3_host)) == 10
    assert (dest / "arr" / "0").read_bytes() == BIG


def test_body_reader_failures(tmp_path: Path, zarr_id: str, client: ApiClient) -> None:
    reader = BodyReader(timeout=5.0)
    try:
        # no answer: an exception the retry loop knows
        with pytest.raises(RETRY_EXCEPTIONS):
            reader.get(f"http://127.0.0.1:{free_port()}/x", lambda b: None, expected=200)
        # the caller's own failure (a disk full) is its own, not the network's
        url = client.get_zarr(zarr_id).object_url("arr/1")

        def full(block: memoryview) -> None:
            raise OSError(28, "No space left on device")

        with pytest.raises(OSError, match="No space") as raised:
            reader.get(url, full, expected=200)
        assert not isinstance(raised.value, httpx.HTTPError)
        # an answer not expected: its status and headers, the body not given to *write*
        got: list[bytes] = []

        def keep(block: memoryview) -> None:  # (a view of the reader's buffer: copied)
            got.append(bytes(block))

        answer = reader.get(url + "-absent", keep, expected=200)
        assert answer.status == 404 and got == []
        # and the connection is fit for the next GET
        assert reader.get(url, keep, expected=200).status == 200
        assert b"".join(got) == SMALL["arr/1"]
    finally:
        reader.close()
