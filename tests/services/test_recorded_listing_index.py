"""A flat listing page of a Zarr whose manifest is too large to hold parsed (issue #39 item 4):
the page is read from the manifest's index (where every :data:`INDEX_EVERY`-th entry's line
begins) by ranged GETs, so its cost does not depend on where in the Zarr it lies; it read
the manifest from its start up to the page before (quadratic for a walk of every page).
The pages are exactly those cut from the manifest held parsed.  On the in-memory store,
with the thresholds made small (a manifest of 240 entries counts as "too large")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import upload
from zarrchive.manifest import manifest_key
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import recorded_listing
from zarrchive.services.zarr_engine.manifests import ManifestStatus, write_manifest
from zarrchive.services.zarr_engine.recorded_listing import (
    KeyRange,
    ManifestCache,
    ObjectEntry,
    recorded_page,
)
from zarrchive.services.zarr_engine.zarrs import get_zarr

#: 240 files in 12 directories of 20 (and two at the root).
FILES = {
    ".zgroup": b"{}",
    "arr/.zarray": b"{}",
    **{f"arr/{i}/{j}": f"{i}.{j}".encode() for i in range(12) for j in range(20)},
}
#: Changes after the manifest (the page merges them): a rewrite, new files, a deletion.
CHANGES = {"arr/3/4": b"rewritten", "arr/3/40": b"new", "arr/9/99": b"new at the end"}


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


class ManifestReads:
    """Bytes of the manifest read from the store (whole GETs and ranges)."""

    def __init__(self, archive: Archive, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        store: Any = archive.store
        get_range, iter_content = store.get_range, store.iter_content

        def counted_range(k: str, start: int, length: int) -> bytes | None:
            data: bytes | None = get_range(k, start, length)
            if k == key and data is not None:
                self.bytes += len(data)
            return data

        def counted_content(k: str, *args: Any, **kwargs: Any) -> Iterator[bytes]:
            for chunk in iter_content(k, *args, **kwargs):
                if k == key:
                    self.bytes += len(chunk)
                yield chunk

        monkeypatch.setattr(store, "get_range", counted_range)
        monkeypatch.setattr(store, "iter_content", counted_content)


def _zarr(api: httpx.Client, zarr_id: str, archive: Archive) -> str:
    """The Zarr with a manifest and changes recorded since; the manifest's key."""
    upload(api, zarr_id, FILES)
    assert write_manifest(archive, zarr_id).status is ManifestStatus.WRITTEN
    with archive.db.session() as session:
        checksum = get_zarr(session, None, zarr_id, check_read=False).checksum
    upload(api, zarr_id, CHANGES)
    api.request(
        "DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "arr/0/0"}]
    ).raise_for_status()
    return manifest_key(zarr_id, checksum)


def _page(archive: Archive, zarr_id: str, prefix: str, after: str, limit: int) -> Any:
    found = recorded_page(archive, zarr_id, False, KeyRange(prefix, after), limit)
    assert found is not None
    return found


def _paths() -> list[str]:
    current = {**FILES, **CHANGES}
    current.pop("arr/0/0")
    return sorted(current)


def test_pages_from_the_index_equal_the_pages_of_the_parsed_manifest(
    api: httpx.Client, zarr_id: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    _zarr(api, zarr_id, archive)
    paths = _paths()
    cuts = [("", ""), ("", "arr/9/99"), ("arr/3/", ""), ("arr/3", "arr/3/4"), ("arr/9/", "")]
    cuts += [("", p) for p in paths[::5]] + [("", paths[-1]), ("zz", "")]
    limits = (1, 17, 1000)
    parsed = recorded_listing.ManifestCache()
    monkeypatch.setattr(recorded_listing, "MANIFEST_CACHE", parsed)
    expected = {(c, n): _page(archive, zarr_id, *c, n) for c in cuts for n in limits}
    assert parsed.loads == 1 and parsed.indexed == 0
    whole = expected[(("", ""), 1000)][0]
    assert [e.key for e in whole] == paths  # (the merge: the deletion, the rewrite, the new)
    assert all(isinstance(e, ObjectEntry) for e in whole)

    indexed = ManifestCache(largest_entries=10)
    monkeypatch.setattr(recorded_listing, "MANIFEST_CACHE", indexed)
    monkeypatch.setattr(recorded_listing, "INDEX_EVERY", 16, raising=False)
    monkeypatch.setattr(recorded_listing, "RANGE_CHUNK", 512, raising=False)
    for (cut, limit), page in expected.items():
        assert _page(archive, zarr_id, *cut, limit) == page, (cut, limit)
    assert indexed.loads == 0 and indexed.indexed == 1


def test_a_page_reads_the_same_bytes_of_the_manifest_wherever_it_lies(
    api: httpx.Client, zarr_id: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _zarr(api, zarr_id, archive)
    size = len(archive.store.get(key) or b"")
    monkeypatch.setattr(recorded_listing, "MANIFEST_CACHE", ManifestCache(largest_entries=10))
    monkeypatch.setattr(recorded_listing, "INDEX_EVERY", 16, raising=False)
    monkeypatch.setattr(recorded_listing, "RANGE_CHUNK", 1024, raising=False)
    reads = ManifestReads(archive, key, monkeypatch)
    _page(archive, zarr_id, "", "", 10)  # builds the index: the file read once
    assert reads.bytes >= size
    paths = _paths()
    read = {}
    for where in (0, len(paths) // 2, len(paths) - 12):
        reads.bytes = 0
        entries, more = _page(archive, zarr_id, "", paths[where], 10)
        assert [e.key for e in entries] == paths[where + 1 : where + 11] and more
        read[where] = reads.bytes
    # 16 + 10 lines at most: one range of 1 KiB, or two (1 + 2 KiB) when a line straddles
    assert max(read.values()) <= 3 * 1024 < size / 4, (read, size)
