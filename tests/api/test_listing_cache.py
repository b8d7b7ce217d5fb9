"""Listings read parsed ``.checksum`` nodes from a cache keyed by ETag: one download and
parse per node version, pages by bisection, never a stale node."""

from __future__ import annotations

import threading

import httpx

from tests.helpers.api_uploads import upload
from tests.helpers.web_site import wide_node
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.node_cache import NODE_CACHE
from zarrchive.storage.keys import checksum_node_key


def test_a_wide_directory_is_parsed_once_and_paged(
    api: httpx.Client, anon: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, {"wide/000000": b"0"})
    key = checksum_node_key(zarr_id, "wide")
    archive.store.put(key, wide_node(100_000), "application/json")
    loads = NODE_CACHE.loads
    seen: list[str] = []
    cursor = None
    for _ in range(4):
        params = {"page_size": 1000, **({"cursor": cursor} if cursor else {})}
        page = anon.get(f"/api/zarr/{zarr_id}/wide/", params=params).json()
        seen += [f["name"] for f in page["files"]]
        cursor = page["next"]
    assert seen == [f"{i:06d}" for i in range(4000)]
    assert page["file_count"] == 100_000
    # pages deep in the directory and file lookups reuse the parsed node
    assert anon.get(f"/api/zarr/{zarr_id}/wide/099999").json()["size"] == 99_999
    assert NODE_CACHE.loads == loads + 1
    # concurrent cold requests for a new version: one load between them
    archive.store.put(key, wide_node(100_001), "application/json")
    results: list[int] = []

    def count() -> None:
        results.append(anon.get(f"/api/zarr/{zarr_id}/wide/").json()["file_count"])

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [100_001] * 4  # the rewritten node is seen at once, never the old one
    assert NODE_CACHE.loads == loads + 2


def test_a_large_node_written_by_a_batch_is_listed_without_a_load(
    api: httpx.Client, anon: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    """The tree updater hands the large nodes it writes to the readers' cache: the first
    listing after the batch costs no download and parse (and shows the batch)."""
    upload(api, zarr_id, {"wide/000000": b"0"})
    archive.store.put(checksum_node_key(zarr_id, "wide"), wide_node(20_000), "application/json")
    upload(api, zarr_id, {"wide/zzz": b"new"})
    loads = NODE_CACHE.loads
    page = anon.get(f"/api/zarr/{zarr_id}/wide/", params={"page_size": 2}).json()
    assert page["file_count"] == 20_001
    assert anon.get(f"/api/zarr/{zarr_id}/wide/zzz").json()["size"] == 3
    assert NODE_CACHE.loads == loads
