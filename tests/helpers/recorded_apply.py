"""Applying a batch the way the apply engine does, recording its changes for manifests.

Until the apply engine calls :func:`~zarrchive.services.manifest_changes.record_applied_changes`
itself, this is the reference of how it must: stage each file (PUT), copy it into place with
boto3 (CopyObject of the staged version), keep each copy's answer, delete the deleted paths
(delete markers), then in one write transaction with the Zarr locked update the tree, store
the new root and record the changes.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import uuid
from collections.abc import Iterable

from sqlalchemy import func, select

from zarrchive.db.models import ZarrChangeSet, utcnow
from zarrchive.manifest import generate_manifest
from zarrchive.services.manifest_changes import WrittenObject, record_applied_changes
from zarrchive.services.manifests import current_entries
from zarrchive.services.runtime import Archive
from zarrchive.services.tree_updater import FileChange, apply_changes
from zarrchive.services.zarrs import get_zarr
from zarrchive.storage.keys import staging_object_key, zarr_object_key


class AppliedButCrashed(Exception):
    """The applier died before its commit (the copies and tree nodes stay in S3)."""


def apply_recorded_batch(
    archive: Archive,
    zarr_id: str,
    written: dict[str, bytes],
    deleted: Iterable[str] = (),
    *,
    crash_before_commit: bool = False,
) -> str:
    """Apply one batch (*written* files, or *deleted* paths) and record it; return the
    Zarr's new checksum.  *crash_before_commit*: the applier dies after its copies and tree
    writes, before its transaction commits (raises :class:`AppliedButCrashed`)."""
    deleted = list(deleted)
    with archive.db.session() as session:
        store = archive.store_for(
            get_zarr(session, None, zarr_id, check_read=False).dandiset.embargoed
        )
    client, bucket = store.client, store.bucket
    uid = uuid.uuid4().hex

    def copy(item: tuple[str, bytes]) -> WrittenObject:
        path, body = item
        staged = staging_object_key(zarr_id, uid, path)
        put = client.put_object(Bucket=bucket, Key=staged, Body=body)
        response = client.copy_object(
            Bucket=bucket,
            Key=zarr_object_key(zarr_id, path),
            CopySource={"Bucket": bucket, "Key": staged, "VersionId": put["VersionId"]},
            MetadataDirective="COPY",
        )
        return WrittenObject.from_copy_response(path, response, len(body))

    answers: list[WrittenObject] = store.map(copy, written.items())
    if deleted:
        store.delete_many(zarr_object_key(zarr_id, p) for p in deleted)
    changes: dict[str, FileChange] = dict.fromkeys(deleted)
    changes.update({p: (hashlib.md5(b).hexdigest(), len(b)) for p, b in written.items()})
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        before = zarr.checksum
        state = apply_changes(store, zarr_id, changes)
        zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
        zarr.modified_at = utcnow()
        seq = (session.scalar(select(func.max(ZarrChangeSet.seq))) or 0) + 1
        record_applied_changes(
            session,
            zarr_id,
            seq=seq,
            checksum_before=before,
            checksum_after=state.checksum,
            written=answers,
            deleted=deleted,
        )
        if crash_before_commit:
            raise AppliedButCrashed(state.checksum)
    store.purge(staging_object_key(zarr_id, uid, ""))
    return state.checksum


def listed_manifest(
    archive: Archive, zarr_id: str, checksum: str, embargoed: bool = False
) -> bytes:
    """The manifest a listing of S3 gives for the Zarr now (what the job wrote before)."""
    store = archive.store_for(embargoed)
    with tempfile.SpooledTemporaryFile() as body:
        generated = generate_manifest(
            current_entries(store, zarr_id), body, database_checksum=checksum
        )
        out = io.BytesIO()
        generated.write_to(out)
    return out.getvalue()
