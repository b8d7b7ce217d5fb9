"""Open batches' multipart uploads that nobody sends to any more (``admin gc``).

An interrupted ``zarrchive upload`` (Ctrl-C) leaves its batch open, with the parts of its big
files in S3, for the rerun to take up: the parts S3 holds are not sent again.  A rerun that
never comes would leave those parts in S3 for good.  Once nothing has been sent to such an
upload for the grace period (its newest part; without parts, its start; never earlier than
its batch was opened), ``admin gc`` aborts it (:func:`abandoned_uploads`).  The batch itself
stays open: a rerun then starts that file over (the archive starts a new upload for it), and
a cancel, or another upload of the Zarr, ends the batch as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select

from zarrchive.db.models import BatchState, UploadBatch, UploadBatchFile, utcnow
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import staging_object_key
from zarrchive.storage.protocol import ObjectStoreProtocol


@dataclass(frozen=True)
class AbandonedUpload:
    """The S3 multipart upload of a big file of an open batch, idle since *last_sent*."""

    key: str
    upload_id: str
    batch_uid: str
    path: str
    last_sent: datetime

    @property
    def why(self) -> str:
        return (
            f"abandoned: {self.path!r} of the open batch {self.batch_uid}, nothing sent to it "
            f"since {self.last_sent:%Y-%m-%d %H:%M} UTC"
        )


def abandoned_uploads(
    archive: Archive,
    store: ObjectStoreProtocol,
    zarr_id: str,
    *,
    grace: timedelta,
    now: datetime | None = None,
) -> list[AbandonedUpload]:
    """The multipart uploads of the Zarr's open batches (the open one and one opened ahead)
    to which nothing has been sent for *grace* (see the module), in path order."""
    cutoff = (now or utcnow()) - grace
    with archive.db.session() as session:
        rows = session.execute(
            select(
                UploadBatch.uid,
                UploadBatch.created_at,
                UploadBatchFile.path,
                UploadBatchFile.multipart_upload_id,
            )
            .join(UploadBatchFile, UploadBatchFile.batch_id == UploadBatch.id)
            .where(
                UploadBatch.zarr_id == zarr_id,
                UploadBatch.state == BatchState.OPEN,
                UploadBatch.created_at <= cutoff,
                UploadBatchFile.multipart_upload_id.is_not(None),
            )
            .order_by(UploadBatch.id, UploadBatchFile.path)
        ).all()
    found: list[AbandonedUpload] = []
    for uid, created_at, path, upload_id in rows:
        assert upload_id is not None
        key = staging_object_key(zarr_id, uid, path)
        activity = store.upload_activity(key, upload_id)
        if activity is None:
            continue  # aborted already (or assembled): nothing to do
        last_sent = max(activity, created_at)
        if last_sent <= cutoff:
            found.append(AbandonedUpload(key, upload_id, uid, path, last_sent))
    return found


__all__ = ["AbandonedUpload", "abandoned_uploads"]
