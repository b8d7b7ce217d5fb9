"""Issue 39 item 3: big files come in parallel ranged GETs written in place, checked by
md5, resumed part by part after an interruption; the md5s a download checked go to the
digest cache (the next run stats the files instead of reading them)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from tests.helpers.local_zarr import zarr_checksum_of
from tests.helpers.range_fetchers import CountingFetcher
from zarrchive.client import ApiClient, Uploader, digest_cache
from zarrchive.client.download import PARTIAL_SUFFIX, PARTS_SUFFIX, Downloader
from zarrchive.client.upload import BatchRecords
from zarrchive.errors import TransferError

BIG_FILE, PART = 4000, 1500  # a "big" file of 10,000 bytes: 7 parts
BIG = bytes((i * 7 + i // 251) % 256 for i in range(10_000))
SMALL = {".zgroup": b'{"zarr_format": 2}', "arr/.zarray": b"{}", "arr/1": b"one" * 300}


@pytest.fixture
def zarr_id(tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords) -> str:
    source = tmp_path / "source.zarr"
    for path, content in {**SMALL, "arr/0": BIG}.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(content)
    result = Uploader(client, jobs=2, records=records).upload(source, dandiset=dandiset)
    assert result.ok and result.zarr_id
    return result.zarr_id


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
