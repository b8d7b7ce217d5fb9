"""``admin gc`` of noncurrent versions (:mod:`zarrchive.services.zarr_engine.version_gc`) on the in-memory
store: what it leaves alone (a Zarr with a batch being applied, one whose snapshot pin has
no manifest, one whose kept manifest can't be read, a blob's content under a delete marker)
and what it removes (only what is past the retention)."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import delete, update

from tests.helpers.assets import add_zarr_asset
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.seeded_zarr import seed_zarr
from zarrchive.db.models import (
    BatchKind,
    BatchState,
    Dandiset,
    EmbargoStatus,
    SharedZarrAsset,
    SharedZarrMode,
    UploadBatch,
    Zarr,
    ZarrPin,
    utcnow,
)
from zarrchive.db.models import Version as VersionRow
from zarrchive.manifest import manifest_key
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import write_manifest
from zarrchive.services.zarr_engine.version_gc import content_versions, zarr_versions
from zarrchive.version_retention import KeepReason

pytestmark = SQLITE_ONLY
DAY = timedelta(days=1)
RETENTION = 30 * DAY


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def _two_states(archive: Archive, zarr_id: str) -> None:
    seed_zarr(archive, zarr_id, {"a": b"1"})
    seed_zarr(archive, zarr_id, {"a": b"2"})


def test_only_versions_past_the_retention_go(archive: Archive, zarr_id: str) -> None:
    _two_states(archive, zarr_id)
    now = utcnow()
    assert zarr_versions(archive, zarr_id, retention=RETENTION, now=now).versions == []
    later = zarr_versions(archive, zarr_id, retention=RETENTION, now=now + 31 * DAY)
    assert {v.key.rsplit("/", 1)[-1] for v in later.versions} == {"a", ".checksum"}
    assert later.freed.bytes == 1 + sum(
        v.size for v in later.versions if v.key.endswith(".checksum")
    )
    everything = zarr_versions(archive, zarr_id, retention=RETENTION, now=now, expire_all=True)
    assert {v.ref for v in everything.versions} == {v.ref for v in later.versions}
    assert not later.applied and archive.store.head(f"zarr/{zarr_id}/a") is not None


def test_a_busy_zarr_and_a_pin_without_manifest_are_left_alone(
    archive: Archive, zarr_id: str
) -> None:
    _two_states(archive, zarr_id)
    late = utcnow() + 31 * DAY
    with archive.db.write_session() as session:
        session.add(
            UploadBatch(zarr_id=zarr_id, kind=BatchKind.DELETE, state=BatchState.QUEUED, seq=1)
        )
    report = zarr_versions(archive, zarr_id, retention=RETENTION, apply=True, now=late)
    assert report.skipped == "a batch of it is being applied" and report.versions == []
    with archive.db.write_session() as session:
        session.execute(delete(UploadBatch))
        draft = session.query(VersionRow).filter(VersionRow.version == "draft").one()
        session.add(ZarrPin(zarr_id=zarr_id, version_id=draft.id, checksum="x", frozen=False))
    report = zarr_versions(archive, zarr_id, retention=RETENTION, apply=True, now=late)
    assert report.skipped is not None and "has no manifest" in report.skipped
    assert len(list(archive.store.iter_versions(f"zarr/{zarr_id}/a"))) == 2


def test_an_unreadable_kept_manifest_removes_nothing(archive: Archive, zarr_id: str) -> None:
    _two_states(archive, zarr_id)
    write_manifest(archive, zarr_id)
    with archive.db.session() as session:
        checksum = session.get(Zarr, zarr_id).checksum  # type: ignore[union-attr]
    archive.store.put(manifest_key(zarr_id, checksum), b"not a manifest")
    late = utcnow() + 31 * DAY
    report = zarr_versions(archive, zarr_id, retention=RETENTION, apply=True, now=late)
    assert report.skipped is not None and "cannot be read" in report.skipped
    assert len(list(archive.store.iter_versions(f"zarr/{zarr_id}/a"))) == 2


def test_a_blob_keeps_its_content_under_a_delete_marker(archive: Archive) -> None:
    store = archive.store
    for body in (b"v1", b"v2"):
        store.put("blobs/abc/def/abcdef", body)
    store.delete("blobs/abc/def/abcdef")
    store.put("lindi/abc/def/abcdef.lindi.json", b"{}")
    store.put("lindi/abc/def/abcdef.lindi.json", b"{ }")
    late = utcnow() + 31 * DAY
    (public, embargoed) = content_versions(archive, retention=RETENTION, apply=True, now=late)
    assert embargoed.versions == []
    assert sorted((v.key.split("/")[0], v.size) for v in public.versions) == [
        ("blobs", 2),  # v1 (v2 stays under the marker)
        ("lindi", 2),
    ]
    left = [v.size for v in store.iter_versions("blobs/") if not v.is_delete_marker]
    assert left == [2] and store.get("lindi/abc/def/abcdef.lindi.json") == b"{ }"


def test_an_unembargoing_zarr_is_left_alone(archive: Archive, zarr_id: str) -> None:
    _two_states(archive, zarr_id)
    with archive.db.write_session() as session:
        session.execute(update(Dandiset).values(embargo_status=EmbargoStatus.UNEMBARGOING))
    report = zarr_versions(
        archive, zarr_id, retention=RETENTION, apply=True, now=utcnow() + 31 * DAY
    )
    assert report.skipped == "its dandiset is being unembargoed"


def test_a_state_another_dandisets_asset_reads_is_kept(
    archive: Archive, api: httpx.Client, dandiset: str, zarr_id: str
) -> None:
    seed_zarr(archive, zarr_id, {"a": b"1"})
    write_manifest(archive, zarr_id)
    with archive.db.session() as session:
        shared = session.get(Zarr, zarr_id).checksum  # type: ignore[union-attr]
    seed_zarr(archive, zarr_id, {"a": b"2"})
    asset = add_zarr_asset(api, dandiset, zarr_id, "z.zarr")
    late = utcnow() + 31 * DAY
    dropped = zarr_versions(archive, zarr_id, retention=RETENTION, now=late)
    assert "a" in {v.key.rsplit("/", 1)[-1] for v in dropped.versions}  # without the hold
    with archive.db.write_session() as session:
        session.add(
            SharedZarrAsset(
                asset_id=asset["asset_id"],
                dandiset_id=int(dandiset),
                zarr_id=zarr_id,
                mode=SharedZarrMode.SNAPSHOT,
                checksum=shared,
            )
        )
    report = zarr_versions(archive, zarr_id, retention=RETENTION, apply=True, now=late)
    assert report.kept[shared] == {KeepReason.PINNED}
    assert all(not v.key.endswith("/a") for v in report.versions)
    assert len([v for v in archive.store.iter_versions(f"zarr/{zarr_id}/a")]) == 2
