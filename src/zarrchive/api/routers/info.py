"""``/server-info`` and ``/api/info/``: DANDI's server info with the archive's limits."""

from __future__ import annotations

from fastapi import APIRouter, Request

from zarrchive.api.deps import ArchiveDep
from zarrchive.api.schemas import ServerInfo, Services, ServiceUrl
from zarrchive.http_common.public_url import public_base
from zarrchive.version import package_version

router = APIRouter(tags=["info"])

#: The dandischema version of the metadata this archive stores (that of dandischema 0.14,
#: which dandi 0.81 ships with); clients check it before uploading.
SCHEMA_VERSION = "0.8.0"
ALLOWED_SCHEMA_VERSIONS = ["0.6.10", "0.7.0", SCHEMA_VERSION]
SCHEMA_URL = (
    f"https://raw.githubusercontent.com/dandi/schema/master/releases/{SCHEMA_VERSION}/dandiset.json"
)
#: The oldest dandi CLI this archive was tested with, and releases known not to work.
CLI_MINIMAL_VERSION = "0.60.0"
CLI_BAD_VERSIONS: list[str] = []


def base_url(request: Request) -> str:
    """The archive's external ``scheme://host:port``."""
    return public_base(request)


def server_info(request: Request, archive: ArchiveDep) -> ServerInfo:
    settings = archive.settings
    root = base_url(request)
    return ServerInfo.model_validate(
        {
            "version": package_version(),
            "schema_version": SCHEMA_VERSION,
            "schema_url": SCHEMA_URL,
            "allowed_schema_versions": ALLOWED_SCHEMA_VERSIONS,
            "services": Services(api=ServiceUrl(url=f"{root}/api"), webui=ServiceUrl(url=root)),
            "cli-minimal-version": CLI_MINIMAL_VERSION,
            "cli-bad-versions": CLI_BAD_VERSIONS,
            "s3_endpoint_url": settings.s3_endpoint_url,
            "bucket": settings.s3_bucket,
            "max_batch_files": settings.max_batch_files,
            "published_zarrs": settings.published_zarrs.value,
        }
    )


router.add_api_route(
    "/api/info/",
    server_info,
    methods=["GET"],
    response_model=ServerInfo,
    summary="The archive's version, services (API URL) and limits",
)
router.add_api_route(
    "/server-info",
    server_info,
    methods=["GET"],
    response_model=ServerInfo,
    summary="DANDI's server info (as /api/info/)",
)
