"""``/api/dandisets/{id}/versions/``: the draft, published versions, publishing."""

from __future__ import annotations

from fastapi import APIRouter

from zarrchive.api.deps import ArchiveDep, UserDep
from zarrchive.api.schemas import VersionMetadataIn, VersionOut, VersionZarrOut
from zarrchive.services import publish, versions

router = APIRouter(tags=["versions"])


def version_out(info: versions.VersionInfo) -> VersionOut:
    return VersionOut(
        dandiset=info.dandiset,
        version=info.version,
        metadata=info.metadata,
        asset_count=info.asset_count,
        size=info.size,
        zarrs=[VersionZarrOut(**z.__dict__) for z in info.zarrs],
        created=info.created,
        modified=info.modified,
    )


@router.get(
    "/api/dandisets/{dandiset_id}/versions/",
    response_model=list[VersionOut],
    summary="The dandiset's versions",
)
def list_versions(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> list[VersionOut]:
    """Every published version, oldest first, then the draft."""
    with archive.db.session() as session:
        return [version_out(v) for v in versions.list_versions(session, user, dandiset_id)]


@router.get(
    "/api/dandisets/{dandiset_id}/versions/{version}/",
    response_model=VersionOut,
    summary="A version",
)
def get_version(dandiset_id: str, version: str, archive: ArchiveDep, user: UserDep) -> VersionOut:
    with archive.db.session() as session:
        return version_out(versions.get_version_info(session, user, dandiset_id, version))


@router.put(
    "/api/dandisets/{dandiset_id}/versions/{version}/",
    response_model=VersionOut,
    summary="Replace the draft's metadata",
)
def update_version(
    dandiset_id: str, version: str, body: VersionMetadataIn, archive: ArchiveDep, user: UserDep
) -> VersionOut:
    """Owners only; published versions never change (403)."""
    with archive.db.write_session() as session:
        info = versions.update_draft_metadata(session, user, dandiset_id, version, body.metadata)
        return version_out(info)


@router.post(
    "/api/dandisets/{dandiset_id}/versions/draft/publish/",
    response_model=VersionOut,
    summary="Publish the draft",
)
def publish_draft(dandiset_id: str, archive: ArchiveDep, user: UserDep) -> VersionOut:
    """Creates version `0.YYMMDD.HHMM` referencing the draft's blobs and Zarrs (nothing is
    copied); every Zarr of it becomes immutable.  Refused (409) while a Zarr of the draft
    has an upload batch open, and while the dandiset is embargoed."""
    return version_out(publish.publish(archive, user, dandiset_id))
