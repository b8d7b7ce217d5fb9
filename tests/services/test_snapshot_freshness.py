"""Whether the manifest of a Zarr's checksum still names its current object versions
(``snapshots.manifest_is_fresh``, what publishing a snapshot pin relies on) is decided by the
change records, not by comparing timestamps: a cancelled batch (the Zarr's ``modified_at``
moves, its state does not) leaves the manifest fresh; a manifest of an earlier visit to the
same state is stale even when its row's time says otherwise (a writer whose clock is ahead).
On the in-memory object store."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from sqlalchemy import update

from tests.helpers.api_uploads import open_batch, upload
from zarrchive.db.models import ZarrManifest, utcnow
from zarrchive.manifest import manifest_key, read_manifest
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.snapshots import (
    manifest_is_fresh,
    manifest_row,
    prepare_manifest,
)
from zarrchive.services.zarr_engine.zarrs import get_zarr
from zarrchive.storage.keys import zarr_object_key


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def fresh(archive: Archive, zarr_id: str) -> bool:
    """Whether the Zarr's checksum has a manifest and it is fresh."""
    with archive.db.session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        row = manifest_row(session, zarr.id, zarr.checksum)
        return row is not None and manifest_is_fresh(session, zarr, row)


def test_a_cancelled_batch_leaves_the_manifest_fresh(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, {"a": b"1"})
    prepare_manifest(archive, zarr_id)
    assert fresh(archive, zarr_id)
    open_batch(api, zarr_id, {"x": b"never sent"})
    response = api.delete(f"/api/zarr/{zarr_id}/upload/")
    assert response.status_code == 204, response.text
    # the Zarr's modified_at moved past the manifest's row; nothing it names changed
    assert fresh(archive, zarr_id)


def test_a_returned_state_is_stale_whatever_the_rows_time_says(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, {"a": b"1"})
    prepare_manifest(archive, zarr_id)  # names the first version of "a"
    upload(api, zarr_id, {"a": b"2"})
    upload(api, zarr_id, {"a": b"1"})  # the same state again, "a" a new version
    with archive.db.write_session() as session:  # written by a worker whose clock is ahead
        session.execute(
            update(ZarrManifest)
            .where(ZarrManifest.zarr_id == zarr_id)
            .values(created_at=utcnow() + timedelta(hours=1))
        )
    assert not fresh(archive, zarr_id)
    # made again for publication: it names the version current now
    prepare_manifest(archive, zarr_id)
    assert fresh(archive, zarr_id)
    with archive.db.session() as session:
        checksum = get_zarr(session, None, zarr_id, check_read=False).checksum
    body = archive.store.get(manifest_key(zarr_id, checksum))
    assert body is not None
    current = archive.store.latest_version(zarr_object_key(zarr_id, "a"))
    assert current is not None
    entries = {e.path: e.version_id for e in read_manifest(body).entries}
    assert entries == {"a": current.version_id}
