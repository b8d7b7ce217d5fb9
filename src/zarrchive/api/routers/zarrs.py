"""``/api/zarr/``: Zarr archives, batched uploads and file deletion."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from zarrchive.api.bodies import JsonBody, batch_limit
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import (
    DeleteFile,
    DirectoryOut,
    DownloadUrlOut,
    DroppedFileOut,
    FileOut,
    FinalizeOut,
    HashedSourceOut,
    HashSourcesIn,
    HashSourcesOut,
    ImportIn,
    ImportOut,
    ManifestOut,
    RefusedUploadOut,
    UploadFile,
    UploadPartOut,
    UploadPartsIn,
    UploadPartsOut,
    UploadUrlOut,
    ZarrCreate,
    ZarrFileIn,
    ZarrObjectPageOut,
    ZarrOut,
)
from zarrchive.content_types import zarr_content_type
from zarrchive.db.models import Zarr
from zarrchive.errors import NotFound, NoUploadInProgress
from zarrchive.http_common.pagination import Page, PageRequest, make_page, page_request
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import manifests, uploads, zarr_info, zarrs
from zarrchive.services.zarr_engine.uploads import import_copy, import_hash

router = APIRouter(tags=["zarr"])
#: Names the batch that ``open`` opened and ``complete`` queued.
BATCH_HEADER = "X-Zarrchive-Batch"
NEW_ZARR = JsonBody(ZarrCreate, login=True)
PATHS = JsonBody(list[DeleteFile], login=False, max_items=batch_limit)
DELETED_PATHS = JsonBody(list[DeleteFile], login=True, max_items=batch_limit)
UPLOAD_FILES = JsonBody(list[UploadFile], login=True, max_items=batch_limit)
ZARR_FILES = JsonBody(list[ZarrFileIn], login=True, max_items=batch_limit)
UPLOAD_PARTS = JsonBody(UploadPartsIn, login=True)
IMPORT = JsonBody(ImportIn, login=True)
HASH_SOURCES = JsonBody(HashSourcesIn, login=True)
#: ``GET /api/zarr/{id}.zarr/{path}``: every file and directory, the root included, with no
#: name taken by another route (the app includes it before the snapshot and Zarr routes).
tree_router = APIRouter(tags=["zarr"])


def zarr_out(archive: Archive, zarr_id: str, user: UserDep) -> ZarrOut:
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
        return _zarr_out(archive, session, zarr)


def _zarr_out(archive: Archive, session: Session, zarr: Zarr) -> ZarrOut:
    info = zarr_info.zarr_info(archive, session, zarr)
    return ZarrOut(**asdict(info))


@router.post(
    "/api/zarr/",
    response_model=ZarrOut,
    summary="Create a Zarr archive",
    openapi_extra=NEW_ZARR.openapi,
)
def create_zarr(
    body: Annotated[ZarrCreate, Depends(NEW_ZARR)], archive: ArchiveDep, user: UserDep
) -> ZarrOut:
    """Mint a new, empty Zarr in a dandiset (owners only); names are unique per dandiset."""
    with archive.db.write_session() as session:
        zarr = zarrs.create_zarr(session, user, body.name, body.dandiset)
        return _zarr_out(archive, session, zarr)


@router.get("/api/zarr/", response_model=Page[ZarrOut], summary="List Zarr archives")
def list_zarrs(
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    asked: Annotated[PageRequest, Depends(page_request)],
    dandiset: str | None = None,
    name: str | None = None,
) -> Page[ZarrOut]:
    """Zarrs visible to the caller, filtered by dandiset and/or exact name, oldest first, in
    DANDI's pages (`{count, next, previous, results}`, `?page=`, `?page_size=`)."""
    with archive.db.session() as session:
        found, count = zarrs.list_zarrs(
            session,
            user,
            dandiset_id=dandiset,
            name=name,
            limit=asked.page_size,
            offset=asked.offset,
        )
        if asked.page > 1 and not found:
            raise NotFound(f"invalid page {asked.page}: there are {count} Zarrs")
        results = [_zarr_out(archive, session, z) for z in found]
    return make_page(request, asked, count, results)


@router.get("/api/zarr/{zarr_id}/", response_model=ZarrOut, summary="A Zarr archive")
def get_zarr(zarr_id: str, archive: ArchiveDep, user: UserDep) -> ZarrOut:
    """Name, dandiset, S3 location, checksum, file count and size."""
    return zarr_out(archive, zarr_id, user)


@router.post(
    "/api/zarr/{zarr_id}/download/",
    response_model=list[DownloadUrlOut],
    response_model_exclude_none=True,  # (no `head_url` for public URLs)
    summary="URLs to read files (presigned for embargoed Zarrs)",
    openapi_extra=PATHS.openapi,
)
def download_urls(
    zarr_id: str,
    body: Annotated[list[DeleteFile], Depends(PATHS)],
    archive: ArchiveDep,
    user: UserDep,
) -> list[DownloadUrlOut]:
    """For each `{"path"}` (at most `max_batch_files`), a URL to GET the file: the public
    URL, or for an embargoed Zarr (owners and admins) a presigned one, and then also a
    presigned `head_url` to HEAD it (sending `x-amz-checksum-mode: ENABLED`)."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    links = zarrs.download_links(archive, zarr, [f.path for f in body])
    return [DownloadUrlOut(path=x.path, url=x.url, head_url=x.head_url) for x in links]


@router.get(
    "/api/zarr/{zarr_id}/manifests/",
    response_model=list[ManifestOut],
    summary="The checksums that have manifest files",
)
def list_manifests(zarr_id: str, archive: ArchiveDep, user: UserDep) -> list[ManifestOut]:
    """Every manifest written for the Zarr (`zarr-manifest/{zarr_id}/{checksum}.json`),
    oldest first."""
    with archive.db.session() as session:
        zarr = zarrs.get_zarr(session, user, zarr_id)
        return [ManifestOut(**m.__dict__) for m in manifests.list_manifests(archive, session, zarr)]


@router.get(
    "/api/zarr/{zarr_id}/upload/",
    status_code=204,
    responses={204: {"description": "A batch is open"}, 404: {"description": "No batch open"}},
    summary="Is an upload batch open?",
)
def upload_status(zarr_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    if not uploads.upload_in_progress(archive, user, zarr_id):
        raise NoUploadInProgress(f"Zarr {zarr_id} has no upload batch open")
    return Response(status_code=204)


@router.post(
    "/api/zarr/{zarr_id}/upload/",
    response_model=list[UploadUrlOut],
    summary="Open an upload batch and get presigned PUT URLs",
    openapi_extra=UPLOAD_FILES.openapi,
)
def start_upload(
    zarr_id: str,
    body: Annotated[list[UploadFile], Depends(UPLOAD_FILES)],
    archive: ArchiveDep,
    user: UserDep,
    response: Response,
    resume: Annotated[
        bool,
        Query(
            description="If the open batch (opened by you) holds exactly these files, answer "
            "its URLs again instead of 409: parts already sent stay"
        ),
    ] = False,
    after: Annotated[
        str | None,
        Query(
            description="The uid of your open batch: open this one ahead, as its next batch "
            "(its URLs work at once; it becomes the open batch when that one is completed, "
            "and cancelling that one cancels it too)",
            min_length=32,
            max_length=32,
            pattern="^[0-9a-f]{32}$",
        ),
    ] = None,
) -> list[UploadUrlOut]:
    """Each URL signs `Content-MD5`: send that header with the file's md5 (base64), and S3
    refuses any other body.  At most `max_batch_files` files; one open batch per Zarr.
    A file declared (`size`) above the archive's multipart threshold gets no URL but a
    `part_size` and `part_count`: ask `POST .../upload/parts/` for its parts' URLs.  The
    header `X-Zarrchive-Batch` names the batch (as `complete` does).

    With `after`, the batch is opened ahead of the completion of the open batch it names
    (yours; at most one batch follows it): checked and signed now, so its files can be sent
    while the batch before drains; `complete` and `DELETE` still act on the batch before,
    and completing it makes this one the open batch."""
    sizes = {f.path: f.size for f in body if f.size is not None}
    opened = uploads.start_batch(
        archive,
        user,
        zarr_id,
        [(f.path, f.etag) for f in body],
        sizes,
        resume=resume,
        after=after,
    )
    response.headers[BATCH_HEADER] = opened.uid
    return [
        UploadUrlOut(
            path=u.path,
            upload_url=u.upload_url,
            content_type=zarr_content_type(u.path) if u.upload_url else None,
            part_size=u.part_size,
            part_count=u.part_count,
        )
        for u in opened.urls
    ]


@router.post(
    "/api/zarr/{zarr_id}/upload/parts/",
    response_model=UploadPartsOut,
    summary="Presigned PUT URLs for parts of a big file of the open batch",
    openapi_extra=UPLOAD_PARTS.openapi,
)
def upload_parts(
    zarr_id: str,
    body: Annotated[UploadPartsIn, Depends(UPLOAD_PARTS)],
    archive: ArchiveDep,
    user: UserDep,
) -> UploadPartsOut:
    """For each part named with its md5, a URL that signs that md5 as `Content-MD5`, or
    `done` when S3 already holds the part with that md5 (an interrupted upload resumes
    without sending it again).  The parts are cut by `part_size` (the last is shorter);
    `complete` assembles them, and the archive checks the file's md5 when it applies the
    batch (a different md5 refuses the batch: see `GET .../upload/refused/`)."""
    answer = uploads.part_urls(
        archive, user, zarr_id, body.path, [(p.part_number, p.md5) for p in body.parts]
    )
    return UploadPartsOut(
        path=answer.path,
        size=answer.size,
        part_size=answer.part_size,
        part_count=answer.part_count,
        parts=[
            UploadPartOut(part_number=p.part_number, upload_url=p.upload_url, done=p.done)
            for p in answer.parts
        ],
    )


@router.post(
    "/api/zarr/{zarr_id}/upload/import/",
    response_model=ImportOut,
    summary="Copy files of your open batch from an S3 bucket the archive imports from",
    openapi_extra=IMPORT.openapi,
)
def import_upload(
    zarr_id: str, body: Annotated[ImportIn, Depends(IMPORT)], archive: ArchiveDep, user: UserDep
) -> ImportOut:
    """Instead of PUTting them: the archive copies each named file of the batch from
    `s3://{bucket}/{prefix}/{path}` (on its own S3, with its own credentials) into the batch,
    if the source object still has the listed `etag` (and `version_id`); then `complete`
    the batch as usual.  403 unless the operator allows that bucket and prefix
    (`ZARRCHIVE_IMPORT_BUCKETS`; never the archive's own buckets): send the files instead.
    409 naming the files if a source object changed since it was listed: cancel the batch."""
    result = import_copy.import_files(
        archive,
        user,
        zarr_id,
        body.batch,
        body.bucket,
        body.prefix,
        [import_copy.SourceFile(f.path, f.etag, f.version_id) for f in body.files],
    )
    return ImportOut(batch=result.batch, copied=result.copied, declined=list(result.declined))


@router.post(
    "/api/zarr/{zarr_id}/upload/import/hash/",
    response_model=HashSourcesOut,
    summary="The md5s of source objects uploaded in parts, read by the archive",
    openapi_extra=HASH_SOURCES.openapi,
)
def hash_import_sources(
    zarr_id: str,
    body: Annotated[HashSourcesIn, Depends(HASH_SOURCES)],
    archive: ArchiveDep,
    user: UserDep,
) -> HashSourcesOut:
    """Before a server-side import (`.../upload/import/`), for the source objects whose ETag
    is no md5 (uploaded in parts): the archive reads each `s3://{bucket}/{prefix}/{path}`
    (if it still has the listed `etag`, `size` and `version_id`) and answers its md5, so the
    uploader reads no byte of the source.  The same rules as the import: writers of the Zarr
    only (checked first), 403 unless the operator allows that bucket and prefix
    (`ZARRCHIVE_IMPORT_BUCKETS`).  At most 1,000 objects and 2 GiB (listed sizes) per request,
    or one object alone of any size: 413 beyond.  409 naming the files if a source object
    changed since it was listed.  (The apply hashes each such object again as it copies it:
    a file is recorded only if that md5 is its batch's.)"""
    md5s = import_hash.hash_sources(
        archive,
        user,
        zarr_id,
        body.bucket,
        body.prefix,
        [import_hash.HashSource(f.path, f.size, f.etag, f.version_id) for f in body.files],
    )
    return HashSourcesOut(
        files=[HashedSourceOut(path=f.path, md5=md5s[f.path]) for f in body.files]
    )


@router.get(
    "/api/zarr/{zarr_id}/upload/refused/",
    response_model=list[RefusedUploadOut],
    summary="Files refused when their batch was applied (newest first)",
)
def refused_uploads(
    zarr_id: str,
    archive: ArchiveDep,
    user: UserDep,
    batch: Annotated[
        list[str],
        Query(
            description="Only these batches (uids, at most 100), every file of them, oldest "
            "first: how an uploader learns which of its batches completed with "
            "`verify=apply` were refused"
        ),
    ] = [],  # noqa: B006 (FastAPI copies the default)
) -> list[RefusedUploadOut]:
    """A batch is refused whole when applied (nothing of it changes the Zarr) if its files
    uploaded in parts do not have their declared md5, or, completed with `verify=apply`, if
    a file is missing in S3 or differs: its files are listed here (owners)."""
    return [
        RefusedUploadOut(
            batch=r.batch_uid,
            path=r.path,
            expected_md5=r.expected_md5,
            found_md5=r.found_md5,
            created_at=r.created_at,
        )
        for r in uploads.refusals(archive, user, zarr_id, batches=batch)
    ]


#: The header of ``complete``'s answer that names the batch it queued.


@router.post(
    "/api/zarr/{zarr_id}/upload/complete/",
    response_model=ZarrOut,
    summary="Verify the batch and update the checksum",
)
def complete_upload(
    zarr_id: str,
    archive: ArchiveDep,
    user: UserDep,
    response: Response,
    wait: Annotated[
        bool,
        Query(description="Apply the batch before answering (`checksum` is then the new one)"),
    ] = False,
    verify: Annotated[
        Literal["now", "apply"],
        Query(
            description="`apply`: queue the batch at once and let its apply check its files "
            "(a batch without files in parts); a batch that fails is refused whole, see "
            "`GET .../upload/refused/?batch=` with the uid of the `X-Zarrchive-Batch` header"
        ),
    ] = "now",
) -> ZarrOut:
    """Checks every file of the batch in S3 (present, ETag == md5); on any problem answers
    400 naming each file and leaves the batch open.  Otherwise the batch is queued to be
    applied (in order, after earlier batches) and the answer comes at once with
    `upload_state` `applying`: the next batch may be opened right away; `checksum` changes
    when the Zarr is `at_rest` again.  With `wait=true` the batch is applied first.  With
    `verify=apply` the check is the apply's (see the parameter).  The header
    `X-Zarrchive-Batch` names the batch queued (absent when a retried request found it
    queued already)."""
    uid = uploads.complete_batch(
        archive, user, zarr_id, wait=wait, verify_on_apply=verify == "apply"
    )
    if uid is not None:
        response.headers[BATCH_HEADER] = uid
    return zarr_out(archive, zarr_id, user)


@router.delete("/api/zarr/{zarr_id}/upload/", status_code=204, summary="Cancel the open batch")
def cancel_upload(zarr_id: str, archive: ArchiveDep, user: UserDep) -> Response:
    """Forgets the open batch and what it uploaded (the Zarr never saw it); batches already
    completed are still applied."""
    uploads.cancel_batch(archive, user, zarr_id)
    return Response(status_code=204)


ObjectPrefix = Annotated[
    str, Query(description="A key prefix relative to the Zarr's root (not a directory)")
]


@router.head(
    "/api/zarr/{zarr_id}/files/",
    status_code=302,
    response_class=Response,
    summary="DANDI's HEAD of a file: redirect to its object",
)
@router.head("/api/zarr/{zarr_id}/files", response_class=Response, include_in_schema=False)
def head_object(
    zarr_id: str, archive: ArchiveDep, user: UserDep, prefix: ObjectPrefix = ""
) -> Response:
    """302 to the URL of the file `prefix` names (presigned for HEAD when embargoed)."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    return RedirectResponse(zarrs.object_url(archive, zarr, prefix, method="HEAD"), 302)


@router.get(
    "/api/zarr/{zarr_id}/files/",
    response_model=ZarrObjectPageOut,
    responses={302: {"description": "`download=true`: the object's URL"}},
    summary="DANDI's flat listing of the Zarr's objects",
)
@router.get(
    "/api/zarr/{zarr_id}/files",
    response_model=ZarrObjectPageOut,
    include_in_schema=False,
)
def list_objects(
    zarr_id: str,
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    prefix: ObjectPrefix = "",
    after: Annotated[str, Query(description="List the keys that sort after this one")] = "",
    limit: Annotated[int, Query(ge=0, le=zarrs.MAX_OBJECT_PAGE)] = zarrs.MAX_OBJECT_PAGE,
    download: Annotated[
        bool, Query(description="Redirect (302) to the object `prefix` names instead")
    ] = False,
) -> ZarrObjectPageOut | Response:
    """Objects in key order (UTF-8 bytes, as S3 lists them) with DANDI's fields; `next`
    is this URL with `after` set to the page's last key.  `download=true` redirects (302)
    to the file `prefix` names: its public URL, presigned for embargoed Zarrs."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    if download:
        return RedirectResponse(zarrs.object_url(archive, zarr, prefix), status_code=302)
    entries, more = zarrs.list_objects(archive, zarr, prefix=prefix, after=after, limit=limit)
    return ZarrObjectPageOut.of(request, entries, more)


@router.post(
    "/api/zarr/{zarr_id}/files/",
    response_model=list[str],
    summary="DANDI's upload: presigned PUT URLs for files (in request order)",
    openapi_extra=ZARR_FILES.openapi,
)
def create_files(
    zarr_id: str,
    body: Annotated[list[ZarrFileIn], Depends(ZARR_FILES)],
    archive: ArchiveDep,
    user: UserDep,
) -> list[str]:
    """Adds the files to the Zarr's open upload batch (opening one if none is): PUT each to
    its URL with `Content-MD5` (the `base64md5` given; a `Content-Type` may be added), then
    `POST .../finalize/`.  At most `max_batch_files` per request; a path given again gets a
    new URL.  Nothing changes in the Zarr before `finalize`."""
    files = [(f.path, uploads.md5_from_base64(f.base64md5)) for f in body]
    return uploads.extend_batch(archive, user, zarr_id, files)


@router.post(
    "/api/zarr/{zarr_id}/finalize/",
    response_model=FinalizeOut,
    summary="DANDI's finalize: verify the upload and apply it",
)
def finalize(zarr_id: str, archive: ArchiveDep, user: UserDep) -> FinalizeOut:
    """Checks every file the upload announced (present in S3 with its md5): files never
    PUT or PUT with another md5 are dropped and named in `dropped`; the rest is queued and
    applied (`status` `Ingesting`, then `Complete`).  With no batch open it does nothing."""
    report = uploads.finalize(archive, user, zarr_id)
    info = zarr_out(archive, report.zarr_id, user)
    return FinalizeOut(
        zarr_id=report.zarr_id,
        status=info.status,
        batch=report.batch,
        files=report.files,
        dropped=[DroppedFileOut(**d.__dict__) for d in report.dropped],
    )


@router.delete(
    "/api/zarr/{zarr_id}/files/",
    status_code=204,
    summary="Delete files and directories",
    openapi_extra=DELETED_PATHS.openapi,
    responses={
        202: {
            "model": ZarrOut,
            "description": "A large deletion is queued: the background job applies it (the "
            "Zarr's `upload_state` is `applying`, its `status` `Ingesting`, until it is done)",
        },
        204: {"description": "Deleted: the Zarr's checksum is the new one"},
    },
)
def delete_files(
    zarr_id: str,
    body: Annotated[list[DeleteFile], Depends(DELETED_PATHS)],
    archive: ArchiveDep,
    user: UserDep,
) -> Response:
    """Each `path` names a file of the Zarr, or a directory (with or without a trailing
    `/`; with one, only a directory will do): every file below it is deleted and the tree
    updated once.  All must exist, else 404 naming the missing ones (`missing`) and nothing
    is deleted; the root directory can't be named (400).  Allowed while an upload batch is
    open; completed batches are applied first.  Up to 1000 files are deleted before the
    answer (204, DANDI's); a larger deletion is queued and applied in the background
    (202 with the Zarr, `upload_state` `applying` until it is done)."""
    deletion = uploads.delete_files(archive, user, zarr_id, [f.path for f in body])
    if deletion.applied:
        return Response(status_code=204)
    info = zarr_out(archive, deletion.zarr_id, user)
    content = TypeAdapter(ZarrOut).dump_json(info)
    return Response(content=content, status_code=202, media_type="application/json")


@router.get(
    "/api/zarr/{zarr_id}/node/{path:path}",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": '`{"checksums": {"directories": [...], "files": [...]}, "digest"}`',
            "content": {"application/json": {}},
        },
        404: {"description": "The Zarr has no such directory"},
    },
    summary="A directory's .checksum node: every child's digest in one answer",
)
def checksum_node(zarr_id: str, path: str, archive: ArchiveDep, user: UserDep) -> Response:
    """The directory's `.checksum` node (`path`, empty: the root) exactly as the archive
    stores and hashes it: each child's `name`, `digest` and `size`, directories then files,
    by name, in one answer whatever the directory's width (a page of the listing routes holds
    at most 1,000); `digest` is the directory's, whose md5 part is the md5 of the
    `checksums` bytes as sent.  `zarrchive upload --patch` reads the directories it changes
    here to predict the Zarr's checksum after it."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    return StreamingResponse(
        zarrs.checksum_node(archive, zarr, path), media_type="application/json"
    )


@tree_router.get(
    "/api/zarr/{zarr_id}.zarr/{path:path}",
    response_model=FileOut | DirectoryOut,
    summary="A file, or a page of a directory's listing (any path; empty: the root)",
)
def browse_tree(
    zarr_id: str,
    path: str,
    archive: ArchiveDep,
    user: UserDep,
    page_size: Annotated[int, Query(ge=1, le=zarrs.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> FileOut | DirectoryOut:
    """As `GET /api/zarr/{id}/{path}`, for every path: `/api/zarr/{id}.zarr/` lists the
    root, and names the Zarr routes take (`files/`, `upload/`, ...) are plain paths here."""
    return browse(zarr_id, path, archive, user, page_size, cursor)


@router.get(
    "/api/zarr/{zarr_id}/{path:path}",
    response_model=FileOut | DirectoryOut,
    summary="A file, or a page of a directory's listing",
)
def browse(
    zarr_id: str,
    path: str,
    archive: ArchiveDep,
    user: UserDep,
    page_size: Annotated[int, Query(ge=1, le=zarrs.MAX_PAGE_SIZE)] = 100,
    cursor: str | None = None,
) -> FileOut | DirectoryOut:
    """A path ending in `/` (or empty) is a directory; otherwise a file if there is one,
    else a directory."""
    zarr = zarrs.zarr_ref(archive, user, zarr_id)
    result = zarrs.browse(archive, zarr, path, page_size=page_size, cursor=cursor)
    if isinstance(result, zarrs.FileEntry):
        return FileOut.of(result)
    return DirectoryOut.of(result)
