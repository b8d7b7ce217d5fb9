"""fsck's one listing (issue #40): the tree, the database's checksum and the manifest audit
read the same listing, split into prefixes by ``/`` (a flat paginated listing is what
SeaweedFS gets wrong for ``big/...`` beside ``big.txt``: see the last test).  On SeaweedFS:
the requests counted are the archive's own to S3."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.api_uploads import oracle, upload
from tests.helpers.s3 import on_s3
from zarrchive.checksum import ChecksumNode
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.fsck import fsck
from zarrchive.services.zarr_engine.manifests import AuditStatus, ManifestStatus, write_manifest
from zarrchive.storage.keys import checksum_node_key, zarr_prefix

#: 60 files in 30 leaf directories (the per-prefix listing sends one request per leaf).
FILES = {f"arr/{i}/{j}": f"{i}.{j}".encode() for i in range(30) for j in range(2)}


class VersionListings:
    """The ``ListObjectVersions`` requests the archive sent for a Zarr's objects."""

    def __init__(self, archive: Archive, zarr_id: str) -> None:
        self.prefix = zarr_prefix(zarr_id)
        self.count = 0
        client: Any = on_s3(archive.store).client
        client.meta.events.register("before-parameter-build.s3.ListObjectVersions", self._listed)

    def _listed(self, params: dict[str, Any], **_kwargs: Any) -> None:
        if str(params.get("Prefix", "")).startswith(self.prefix):
            self.count += 1


def test_fsck_lists_a_zarr_once(api: httpx.Client, zarr_id: str, archive: Archive) -> None:
    upload(api, zarr_id, FILES)
    assert write_manifest(archive, zarr_id).status in (
        ManifestStatus.WRITTEN,
        ManifestStatus.EXISTS,
    )
    listings = VersionListings(archive, zarr_id)
    report = fsck(archive, zarr_id)
    assert report.ok, report.problems
    assert (report.checksum_from_s3, report.file_count) == (oracle(FILES), len(FILES))
    assert report.manifest == AuditStatus.MATCHES
    # one listing: the plan's levels, then one per leaf prefix (30 leaves, 2 levels above)
    assert listings.count <= 33, listings.count


def test_fsck_finds_a_planted_mismatch_from_the_flat_listing(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    """The same findings as before: a wrong node, a stray object behind the archive's back
    (the tree, the database's checksum and the manifest audit all see it)."""
    upload(api, zarr_id, FILES)
    assert write_manifest(archive, zarr_id).status in (
        ManifestStatus.WRITTEN,
        ManifestStatus.EXISTS,
    )
    wrong = ChecksumNode()
    wrong.set_file("x", "f" * 32, 1)
    archive.store.put(checksum_node_key(zarr_id, "arr/7"), wrong.to_json())
    archive.store.put(f"{zarr_prefix(zarr_id)}arr/3/stray", b"stray")
    report = fsck(archive, zarr_id)
    with_stray = {**FILES, "arr/3/stray": b"stray"}
    assert (report.checksum_from_s3, report.file_count) == (oracle(with_stray), 61)
    assert f"wrong node {checksum_node_key(zarr_id, 'arr/7')}" in report.problems
    assert f"wrong node {checksum_node_key(zarr_id, 'arr/3')}" in report.problems
    assert any("database holds checksum" in p for p in report.problems)
    assert report.manifest == AuditStatus.DIFFERS
    assert any(p.startswith("manifest") and "arr/3/stray" in p for p in report.problems)
    repaired = fsck(archive, zarr_id, repair=True)
    assert repaired.repaired
    assert fsck(archive, zarr_id).ok


def test_fsck_is_clean_where_a_flat_listing_loses_versions(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    """More than a page of versions under ``big/`` beside ``big.txt`` (``.`` sorts below
    ``/``): SeaweedFS's flat paginated listing loses or misorders them; fsck's listing by
    prefixes sees every file, so it finds nothing wrong."""
    files = {f"big/{i // 100}/{i % 100}": b"x" for i in range(1100)}
    files["big.txt"] = b"beside big/"
    files[".zgroup"] = b"{}"
    upload(api, zarr_id, files)
    report = fsck(archive, zarr_id)
    assert report.ok, report.problems
    assert (report.checksum_from_s3, report.file_count) == (oracle(files), len(files))
