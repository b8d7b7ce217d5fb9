"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from zarrchive import __version__
from zarrchive.api.errors import install_error_handlers
from zarrchive.api.middleware import RequestGuard
from zarrchive.api.routers import assets, blob_uploads, dandisets, info, versions, zarrs
from zarrchive.services.runtime import Archive

DESCRIPTION = """
An archive for Zarr datasets. Upload a Zarr in batches through presigned S3 URLs;
the archive verifies each batch and keeps the Dandi Zarr checksum (a Merkle tree
hash stored in per-directory `.checksum` files) up to date.

Authenticate with `Authorization: token KEY`.
"""


def create_app(archive: Archive, *, close_on_shutdown: bool = False) -> FastAPI:
    """The API over *archive* (database, object store and job queue already set up)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if close_on_shutdown:
            archive.close()

    app = FastAPI(
        title="zarrchive",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.archive = archive
    install_error_handlers(app)
    app.add_middleware(RequestGuard)
    app.include_router(info.router)
    app.include_router(dandisets.router)
    app.include_router(zarrs.router)
    app.include_router(versions.router)
    app.include_router(assets.router)
    app.include_router(blob_uploads.router)
    return app
