"""``/api/zarr/{id}/history/`` and ``/api/zarr/{id}/restore/``: a Zarr's checksums, and rolling
it back to one of them (:mod:`zarrchive.services.zarr_engine.zarr_restore`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.db.models import utcnow
from zarrchive.services.zarr_engine import zarr_history, zarr_restore
from zarrchive.services.zarr_engine.zarr_history import ZarrState
from zarrchive.services.zarr_engine.zarr_restore import RestoreOutcome

router = APIRouter(tags=["zarr"])


class RestoreIn(BaseModel):
    checksum: str = Field(min_length=1, max_length=80)


RESTORE_BODY = JsonBody(RestoreIn, login=True)


@router.get(
    "/api/zarr/{zarr_id}/history/",
    response_model=list[ZarrState],
    summary="The checksums the Zarr had, newest first",
)
def history(zarr_id: str, archive: ArchiveDep, user: UserDep) -> list[ZarrState]:
    """Each checksum the Zarr had (from its manifests and change records), once, at the last
    time it came to it, newest first: its file count and size, whether it is the current one,
    and whether the Zarr can be restored to it (it has a manifest, which gc keeps with the
    object versions it names: published, current, or younger than the archive's retention)."""
    with archive.db.session() as session:
        states = zarr_history.zarr_history(
            session,
            user,
            zarr_id,
            now=utcnow(),
            retention=timedelta(days=archive.settings.version_retention_days),
        )
    return states


@router.post(
    "/api/zarr/{zarr_id}/restore/",
    response_model=RestoreOutcome,
    responses={
        403: {"description": "Not an owner of the Zarr's dandiset"},
        404: {"description": "No such Zarr, or no manifest of that checksum"},
        409: {"description": "Frozen by a published version, or a batch open or pending"},
    },
    summary="Roll the Zarr back to an earlier checksum",
    openapi_extra=RESTORE_BODY.openapi,
)
def restore(
    zarr_id: str,
    body: Annotated[RestoreIn, Depends(RESTORE_BODY)],
    archive: ArchiveDep,
    user: UserDep,
) -> RestoreOutcome:
    """Bring the Zarr (owners, drafts only) back to `checksum`, one the history lists as
    restorable: every file at the version its manifest records (server-side copies of
    those versions into place, the files it lacks deleted), as batches of the apply engine
    (`max_batch_files` changes each); only differences are copied.  The current checksum
    changes nothing (200, no batch).  Up to `max_batch_files` changes are applied before the
    answer; with more, `applied` is false and the Zarr is `applying` until its checksum is
    `checksum`.  Refused, changing nothing: 404 without a manifest of `checksum`, 403 for
    non-owners, 409 when a published version froze the Zarr or a batch is open or pending."""
    return zarr_restore.restore_zarr(archive, user, zarr_id, body.checksum)
