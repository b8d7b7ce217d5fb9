"""Issue 40: DANDI's flat listing ``GET /api/zarr/{id}/files/`` answers the recorded md5 of a
file assembled from parts, never S3's ``-N`` ETag (as the file route and fsck do)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from tests.helpers.api_uploads import oracle
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.multipart import MIB, THRESHOLD, big_bytes, open_sized, put_small, send_parts
from tests.helpers.zarr_client import md5
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import recorded_listing, zarrs
from zarrchive.services.zarr_engine.manifests import write_manifest
from zarrchive.services.zarr_engine.node_cache import NODE_CACHE

pytestmark = [pytest.mark.settings(multipart_threshold=THRESHOLD), SQLITE_ONLY]

BIG = big_bytes(THRESHOLD + MIB, seed=3)  # two parts
SMALL = {".zgroup": b'{"zarr_format": 2}', "arr/.zarray": b"{}", "arr/1": b"one"}


def listed_etags(api: httpx.Client, zarr_id: str) -> dict[str, str]:
    response = api.get(f"/api/zarr/{zarr_id}/files/", params={"limit": 1000})
    assert response.status_code == 200, response.text
    return {r["Key"]: r["ETag"].strip('"') for r in response.json()["results"]}


def test_flat_listing_answers_the_md5_of_a_file_sent_in_parts(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    files = {**SMALL, "arr/0": BIG}
    response = open_sized(api, zarr_id, files)
    assert response.status_code == 200, response.text
    put_small(response.json(), files)
    send_parts(api, zarr_id, "arr/0", BIG, THRESHOLD)
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert done.status_code == 200 and done.json()["checksum"] == oracle(files), done.text
    head = archive.store.head(f"zarr/{zarr_id}/arr/0")
    assert head is not None and head.etag.endswith("-2")  # S3's ETag: not an md5
    expected = {path: md5(content) for path, content in files.items()}
    # From the change records (no manifest yet), with the node cache cold and warm.
    NODE_CACHE.clear()
    assert listed_etags(api, zarr_id) == expected
    assert listed_etags(api, zarr_id) == expected
    # From a manifest made from S3's listing (as fsck --repair makes it: S3's ETags), held
    # parsed, with the node cache cold and warm.
    write_manifest(archive, zarr_id, force=True, from_listing=True)
    recorded_listing.MANIFEST_CACHE.clear()
    for _ in range(2):
        assert listed_etags(api, zarr_id) == expected
        NODE_CACHE.clear()
    # From the walk of the nodes (a Zarr without records).
    ref = zarrs.ZarrRef(zarr_id, embargoed=False, modified_at=datetime.now(UTC))
    walked, _ = zarrs.walked_objects(archive, ref, prefix="", after="", limit=1000)
    assert {e.key: e.etag for e in walked} == expected
