"""``/api/uploads/``: uploads of blobs (regular files), single PUT or multipart."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import (
    BlobCompleteIn,
    BlobCompleteOut,
    BlobOut,
    BlobPartOut,
    BlobUploadIn,
    BlobUploadOut,
    ValidatingOut,
)
from zarrchive.services import blobs

router = APIRouter(tags=["blobs"])


@router.post("/api/uploads/initialize/", response_model=BlobUploadOut, summary="Start an upload")
def initialize(body: BlobUploadIn, archive: ArchiveDep, user: UserDep) -> BlobUploadOut:
    """Owners of the dandiset only.  Content already stored answers its `blob_id` at once.
    Up to 5 GiB: one PUT URL that signs `Content-MD5`.  Beyond: one URL per part; PUT each,
    then complete with the parts' ETags."""
    plan = blobs.initialize(archive, user, body.dandiset, body.size, body.md5)
    return BlobUploadOut(
        upload_id=plan.upload_id,
        blob_id=plan.blob_id,
        multipart=plan.multipart,
        part_size=plan.part_size,
        parts=[BlobPartOut(**p.__dict__) for p in plan.parts],
    )


@router.post(
    "/api/uploads/{upload_id}/complete/",
    response_model=BlobCompleteOut,
    summary="Assemble a multipart upload",
)
def complete(
    upload_id: str, body: BlobCompleteIn, archive: ArchiveDep, user: UserDep
) -> BlobCompleteOut:
    etag = blobs.complete(archive, user, upload_id, [(p.part_number, p.etag) for p in body.parts])
    return BlobCompleteOut(upload_id=upload_id, etag=etag)


@router.post(
    "/api/uploads/{upload_id}/validate/",
    response_model=BlobOut,
    responses={202: {"model": ValidatingOut, "description": "Being validated: ask again"}},
    summary="Verify the upload and get its blob_id",
)
def validate(upload_id: str, archive: ArchiveDep, user: UserDep) -> BlobOut | JSONResponse:
    """Checks size and md5.  A single PUT is checked at once; a multipart object is read
    and hashed by a background job: the answer is then 202 `{"status": "validating"}`, and
    the same request, repeated, answers the blob once the job is done.  On a mismatch the
    object is removed and the answer is 400: start again."""
    info = blobs.validate(archive, user, upload_id)
    if info is None:
        body = ValidatingOut(upload_id=upload_id, status="validating")
        return JSONResponse(body.model_dump(), status_code=202, headers={"Retry-After": "2"})
    return BlobOut(blob_id=info.blob_id, md5=info.md5, size=info.size)


@router.delete("/api/uploads/{upload_id}/", status_code=204, summary="Cancel an upload")
def cancel(upload_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    blobs.cancel(archive, user, upload_id)
    return Response(status_code=204)
