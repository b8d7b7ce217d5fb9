"""``/api/info/``."""

from __future__ import annotations

from fastapi import APIRouter

from zarrchive import __version__
from zarrchive.api.deps import ArchiveDep
from zarrchive.api.schemas import Info

router = APIRouter(tags=["info"])


@router.get("/api/info/", response_model=Info, summary="The archive's version and limits")
def info(archive: ArchiveDep) -> Info:
    settings = archive.settings
    return Info(
        version=__version__,
        s3_endpoint_url=settings.s3_endpoint_url,
        bucket=settings.s3_bucket,
        max_batch_files=settings.max_batch_files,
        published_zarrs=settings.published_zarrs.value,
    )
