"""fsck (``services.zarr_engine.fsck``): finds and repairs corrupt, missing and extra nodes and a wrong
checksum in the database; refuses to repair while a batch is open.  On the in-memory object
store (unit tests: S3's own behaviour is the conformance suite's)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.helpers.api_uploads import FILES, assert_nodes_match, info, open_batch, oracle, upload
from zarrchive.checksum import ChecksumNode
from zarrchive.db.models import Zarr
from zarrchive.errors import InvalidInput
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import fsck as fsck_service
from zarrchive.services.zarr_engine.fsck import fsck
from zarrchive.services.zarr_engine.manifests import AuditStatus, ManifestStatus, write_manifest
from zarrchive.storage.keys import checksum_node_key, zarr_prefix


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


#: A Zarr of four files (that of tests/api/test_upload_integrity.py).
FOUR_FILES = {".zgroup": b"{}", "arr/.zarray": b"{...}", "arr/0": b"zero", "arr/1": b"one"}


def test_fsck_finds_and_repairs_corruption(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, FILES)
    assert fsck(archive, zarr_id).ok
    # corrupt one node (valid JSON, wrong content), delete another, add an extra one
    wrong = ChecksumNode()
    wrong.set_file("x", "f" * 32, 1)
    archive.store.put(checksum_node_key(zarr_id, "arr/sub"), wrong.to_json())
    archive.store.delete(checksum_node_key(zarr_id, "other"))
    archive.store.put(checksum_node_key(zarr_id, "ghost"), wrong.to_json())
    with archive.db.session() as session:
        zarr = session.scalar(select(Zarr).where(Zarr.id == zarr_id))
        assert zarr is not None
        zarr.checksum = "0" * 32 + "-1--1"
    report = fsck(archive, zarr_id)
    assert not report.ok and not report.repaired
    assert sorted(report.problems[:3]) == sorted(
        [
            f"wrong node {checksum_node_key(zarr_id, 'arr/sub')}",
            f"missing node {checksum_node_key(zarr_id, 'other')}",
            f"extra node {checksum_node_key(zarr_id, 'ghost')}",
        ]
    )
    assert any("database holds checksum" in p for p in report.problems)
    assert fsck(archive, zarr_id, repair=True).repaired
    assert fsck(archive, zarr_id).ok
    assert info(api, zarr_id)["checksum"] == oracle(FILES)
    assert_nodes_match(archive, zarr_id, FILES)


def test_fsck_repair_refused_while_a_batch_is_open(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, FOUR_FILES)
    open_batch(api, zarr_id, {"arr/0": b"x"})
    archive.store.put(checksum_node_key(zarr_id, "arr"), b"{}", "application/json")
    from zarrchive.errors import Conflict

    with pytest.raises(Conflict, match="batch open"):
        fsck_service.fsck(archive, zarr_id, repair=True)
    assert archive.store.get(checksum_node_key(zarr_id, "arr")) == b"{}"  # untouched


class CountedListings:
    """How many times the archive's store listed a Zarr's objects (any listing call)."""

    def __init__(self, store: Any, monkeypatch: pytest.MonkeyPatch, zarr_id: str) -> None:
        self.calls: list[str] = []
        prefix = zarr_prefix(zarr_id)
        for name in ("iter_objects", "iter_current_versions", "iter_versions", "iter_directory"):
            listed = getattr(store, name)

            def counted(
                p: str, *args: Any, _name: str = name, _listed: Any = listed, **kw: Any
            ) -> Any:
                if p.startswith(prefix) or prefix.startswith(p):
                    self.calls.append(_name)
                return _listed(p, *args, **kw)

            monkeypatch.setattr(store, name, counted)


def test_fsck_lists_the_zarr_once_for_the_tree_and_the_manifest(
    api: httpx.Client, zarr_id: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 10^6 files each listing takes minutes: the tree and the manifest audit share one."""
    upload(api, zarr_id, FILES)
    assert write_manifest(archive, zarr_id).status is ManifestStatus.WRITTEN
    listings = CountedListings(archive.store, monkeypatch, zarr_id)
    report = fsck(archive, zarr_id)
    assert report.ok and report.manifest == AuditStatus.MATCHES
    assert (report.checksum_from_s3, report.file_count) == (oracle(FILES), len(FILES))
    assert len(listings.calls) == 1, listings.calls
    # a file written behind the archive's back: both checks see it, from the one listing;
    # the alarm it raises writes the manifest again from a listing of its own (only then)
    archive.store.put(f"zarr/{zarr_id}/stray", b"stray")
    listings.calls.clear()
    report = fsck(archive, zarr_id)
    assert len(listings.calls) == 2, listings.calls
    assert report.manifest == AuditStatus.DIFFERS
    assert any("database holds checksum" in p for p in report.problems)
    assert any(p.startswith("manifest") and "stray" in p for p in report.problems)
    assert report.checksum_from_s3 == oracle({**FILES, "stray": b"stray"})


def test_fsck_of_a_busy_zarr_lists_it_once_for_the_tree(
    api: httpx.Client, zarr_id: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit ends before listing (a batch open): the tree still gets the whole listing."""
    upload(api, zarr_id, FOUR_FILES)
    open_batch(api, zarr_id, {"arr/0": b"x"})
    listings = CountedListings(archive.store, monkeypatch, zarr_id)
    report = fsck(archive, zarr_id)
    assert report.manifest == AuditStatus.BUSY and report.ok, report.problems
    assert (report.checksum_from_s3, report.file_count) == (oracle(FOUR_FILES), 4)
    assert len(listings.calls) == 1, listings.calls


def test_an_object_from_parts_without_a_recorded_md5_is_named(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    """Its ETag is not an md5 and the archive recorded none: fsck can't hash it, says so."""
    upload(api, zarr_id, FOUR_FILES)
    key = f"zarr/{zarr_id}/arr/2"
    upload_id = archive.store.create_multipart_upload(key)
    etag = archive.store.upload_part(key, upload_id, 1, b"two")  # type: ignore[attr-defined]
    archive.store.complete_multipart_upload(key, upload_id, [(1, etag)])
    with pytest.raises(InvalidInput, match=f"{zarr_id}/arr/2: its ETag .* is not an md5"):
        fsck(archive, zarr_id)
