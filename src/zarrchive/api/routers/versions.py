"""``/api/dandisets/{id}/versions/``: the draft, published versions, publishing (DANDI's
shapes: a version's route answers its metadata, ``info/`` describes it)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from zarrchive.api.bodies import JsonBody
from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.routers.dandisets import dandiset_out, version_summary
from zarrchive.api.schemas import (
    DandiVersionOut,
    ValidationErrorOut,
    VersionInfoOut,
    VersionMetadataIn,
    VersionZarrOut,
)
from zarrchive.http_common.pagination import Page, PageRequest, make_page, page_request
from zarrchive.services.dandi import dandisets, publish, versions

router = APIRouter(tags=["versions"])
NEW_METADATA = JsonBody(VersionMetadataIn, login=True)


def version_info_out(
    archive: ArchiveDep, user: UserDep, dandiset_id: str, info: versions.VersionInfo
) -> VersionInfoOut:
    with archive.db.session() as session:
        dandiset = dandiset_out(session, dandisets.get_dandiset(session, user, dandiset_id))
    v = info.validation
    return VersionInfoOut(
        **version_summary(info).model_dump(),
        dandiset=dandiset,
        metadata=info.metadata,
        contact_person=info.contact_person,
        asset_validation_errors=[
            ValidationErrorOut(**e.__dict__) for e in (v.asset_errors if v else [])
        ],
        version_validation_errors=[
            ValidationErrorOut(**e.__dict__) for e in (v.version_errors if v else [])
        ],
        zarrs=[VersionZarrOut(**z.__dict__) for z in info.zarrs],
    )


@router.get(
    "/api/dandisets/{dandiset_id}/versions/",
    response_model=Page[DandiVersionOut],
    summary="A page of the dandiset's versions",
)
def list_versions(
    dandiset_id: str,
    request: Request,
    archive: ArchiveDep,
    user: UserDep,
    asked: Annotated[PageRequest, Depends(page_request)],
    order: Annotated[
        str | None, Query(description="created, modified, version; '-' reverses")
    ] = None,
) -> Page[DandiVersionOut]:
    """By default every published version, oldest first, then the draft."""
    with archive.db.session() as session:
        found = versions.list_versions(session, user, dandiset_id, order)
    page = found[asked.offset : asked.offset + asked.page_size]
    return make_page(request, asked, len(found), [version_summary(v) for v in page])


@router.get(
    "/api/dandisets/{dandiset_id}/versions/{version}/",
    response_model=dict[str, Any],
    summary="A version's metadata",
)
def get_version(
    dandiset_id: str, version: str, archive: ArchiveDep, user: UserDep
) -> dict[str, Any]:
    """The metadata as stored, with `identifier` (`DANDI:000001`), `id`, `version`, `name`."""
    with archive.db.session() as session:
        return versions.get_version_info(session, user, dandiset_id, version).metadata


@router.get(
    "/api/dandisets/{dandiset_id}/versions/{version}/info/",
    response_model=VersionInfoOut,
    summary="A version: status, asset count, size, metadata, Zarrs",
)
def get_version_info(
    dandiset_id: str, version: str, archive: ArchiveDep, user: UserDep
) -> VersionInfoOut:
    with archive.db.session() as session:
        info = versions.get_version_detail(session, user, dandiset_id, version)
    return version_info_out(archive, user, dandiset_id, info)


@router.put(
    "/api/dandisets/{dandiset_id}/versions/{version}/",
    response_model=VersionInfoOut,
    summary="Replace the draft's metadata",
    openapi_extra=NEW_METADATA.openapi,
)
def update_version(
    dandiset_id: str,
    version: str,
    body: Annotated[VersionMetadataIn, Depends(NEW_METADATA)],
    archive: ArchiveDep,
    user: UserDep,
) -> VersionInfoOut:
    """Owners only; published versions never change (403).  `name` (default: the
    metadata's) renames the dandiset; `identifier`, `id` and `version` are the archive's."""
    with archive.db.write_session() as session:
        info = versions.update_draft_metadata(
            session, user, dandiset_id, version, body.metadata, body.name
        )
    return version_info_out(archive, user, dandiset_id, info)


@router.post(
    "/api/dandisets/{dandiset_id}/versions/draft/publish/",
    response_model=VersionInfoOut,
    summary="Publish the draft",
)
def publish_draft(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> VersionInfoOut:
    """Creates version `0.YYMMDD.HHMM` referencing the draft's blobs and Zarrs (nothing is
    copied) and answers it (`status` `Published` at once); the draft's status is then
    `Published` until it changes.  Refused (409) while a Zarr of the draft has an upload
    batch open, and while the dandiset is embargoed."""
    info = publish.publish(archive, user, dandiset_id)
    return version_info_out(archive, user, dandiset_id, info)
