"""``/api/uploads/`` and ``/api/blobs/``: uploads of blobs (regular files), DANDI's flow
(dandi-etag, multipart by DANDI's part rule, the client completes at S3) or ours (md5)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import (
    BlobCompleteIn,
    BlobCompleteOut,
    BlobExistsOut,
    BlobOut,
    BlobPartOut,
    BlobUploadIn,
    BlobUploadOut,
    CompletionOut,
    DigestIn,
    ValidatingOut,
)
from zarrchive.errors import InvalidInput
from zarrchive.services.dandi import blobs

router = APIRouter(tags=["blobs"])
NEW_UPLOAD = JsonBody(BlobUploadIn, login=True)
PARTS = JsonBody(BlobCompleteIn, login=True)
DIGEST = JsonBody(DigestIn, login=False)

DANDI_ETAG = "dandi:dandi-etag"


def blob_out(info: blobs.BlobInfo) -> BlobOut:
    return BlobOut(blob_id=info.blob_id, etag=info.etag, size=info.size, md5=info.md5)


@router.post(
    "/api/uploads/initialize/",
    response_model=BlobUploadOut,
    responses={409: {"model": BlobExistsOut, "description": "Stored already: `Location`"}},
    summary="Start an upload",
    openapi_extra=NEW_UPLOAD.openapi,
)
def initialize(
    body: Annotated[BlobUploadIn, Depends(NEW_UPLOAD)], archive: ArchiveDep, user: UserDep
) -> Response | BlobUploadOut:
    """Owners of the dandiset only.

    DANDI's `{contentSize, digest: {algorithm: "dandi:dandi-etag", value}, dandiset}`: content
    already stored answers 409 with the blob's id in `Location`; else one presigned URL per
    part (64 MiB parts, larger beyond 10,000 parts); PUT each, then `complete/`.

    Ours, `{size, md5, dandiset}`: content already stored answers its `blob_id`; up to
    5 GiB one PUT URL that signs `Content-MD5`, beyond one URL per part."""
    if body.digest is not None or body.content_size is not None:
        if body.digest is None or body.content_size is None or body.size or body.md5:
            raise InvalidInput(
                "give either {contentSize, digest, dandiset} or {size, md5, dandiset}"
            )
        if body.digest.algorithm != DANDI_ETAG:
            raise InvalidInput(f"the digest's algorithm must be {DANDI_ETAG!r}")
        plan = blobs.initialize_dandi(
            archive, user, body.dandiset, body.content_size, body.digest.value
        )
        if plan.blob_id is not None:
            exists = BlobExistsOut(detail="Blob already exists.", blob_id=plan.blob_id)
            return JSONResponse(
                exists.model_dump(), status_code=409, headers={"Location": plan.blob_id}
            )
        return BlobUploadOut(
            upload_id=plan.upload_id, parts=[BlobPartOut(**p.__dict__) for p in plan.parts]
        )
    if body.size is None or body.md5 is None:
        raise InvalidInput("give either {contentSize, digest, dandiset} or {size, md5, dandiset}")
    ours = blobs.initialize(archive, user, body.dandiset, body.size, body.md5)
    return BlobUploadOut(
        upload_id=ours.upload_id,
        blob_id=ours.blob_id,
        multipart=ours.multipart,
        part_size=ours.part_size,
        parts=[BlobPartOut(**p.__dict__) for p in ours.parts],
    )


@router.post(
    "/api/uploads/{upload_id}/complete/",
    response_model=CompletionOut | BlobCompleteOut,
    summary="Finish a multipart upload",
    openapi_extra=PARTS.openapi,
)
def complete(
    upload_id: str,
    body: Annotated[BlobCompleteIn, Depends(PARTS)],
    archive: ArchiveDep,
    user: UserDep,
) -> CompletionOut | BlobCompleteOut:
    """`{parts: [{part_number, etag}]}` with the ETags S3 answered.  DANDI's uploads answer
    `{complete_url, body}`: POST that body to that URL (S3's CompleteMultipartUpload);
    ours are assembled here and answer the object's ETag."""
    done = blobs.complete(archive, user, upload_id, [(p.part_number, p.etag) for p in body.parts])
    if isinstance(done, blobs.Completion):
        return CompletionOut(complete_url=done.complete_url, body=done.body)
    return BlobCompleteOut(upload_id=upload_id, etag=done)


@router.post(
    "/api/uploads/{upload_id}/validate/",
    response_model=BlobOut,
    responses={202: {"model": ValidatingOut, "description": "Being validated: ask again"}},
    summary="Verify the upload and get its blob_id",
)
def validate(upload_id: str, archive: ArchiveDep, user: UserDep) -> BlobOut | JSONResponse:
    """DANDI's uploads: S3's ETag of the assembled object and its size must be the announced
    dandi-etag and size, checked at once.  Ours: size and md5; a single PUT is checked at
    once; a multipart object is read and hashed by a background job: the answer is then 202
    `{"status": "validating"}`, and the same request, repeated, answers the blob once the job
    is done.  On a mismatch the object is removed and the answer is 400: start again."""
    info = blobs.validate(archive, user, upload_id)
    if info is None:
        body = ValidatingOut(upload_id=upload_id, status="validating")
        return JSONResponse(body.model_dump(), status_code=202, headers={"Retry-After": "2"})
    return blob_out(info)


@router.delete("/api/uploads/{upload_id}/", status_code=204, summary="Cancel an upload")
def cancel(upload_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    blobs.cancel(archive, user, upload_id)
    return Response(status_code=204)


@router.post(
    "/api/blobs/digest/",
    response_model=BlobOut,
    summary="Find a blob by its digest",
    openapi_extra=DIGEST.openapi,
)
def find_by_digest(
    body: Annotated[DigestIn, Depends(DIGEST)], archive: ArchiveDep, user: UserDep
) -> BlobOut:
    """DANDI's `{algorithm: "dandi:dandi-etag", value}` (or `dandi:md5`): the blob, or 404."""
    return blob_out(blobs.digest_lookup(archive, user, body.algorithm, body.value))
