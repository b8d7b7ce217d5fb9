"""The FastAPI application factory."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from zarrchive.api.bodies import document_bodies
from zarrchive.api.cors import CorsMiddleware
from zarrchive.api.middleware import RequestGuard
from zarrchive.api.routers import (
    assets,
    audit,
    auth,
    blob_uploads,
    dandisets,
    info,
    owners,
    pinned_views,
    readers,
    reviewers,
    snapshots,
    trash,
    users,
    versions,
    zarr_history,
    zarrs,
)
from zarrchive.http_common.errors import install_error_handlers
from zarrchive.http_common.public_url import PublicAddress
from zarrchive.services.runtime import Archive
from zarrchive.version import package_version

log = logging.getLogger(__name__)

DESCRIPTION = """
An archive for Zarr datasets. Upload a Zarr in batches through presigned S3 URLs;
the archive verifies each batch and keeps the Dandi Zarr checksum (a Merkle tree
hash stored in per-directory `.checksum` files) up to date.

Authenticate with `Authorization: token KEY`.
"""


def _sweep_pending(archive: Archive) -> None:
    from zarrchive.services.zarr_engine.uploads import sweep_pending

    try:
        sweep_pending(archive)
    except Exception:  # the database or S3 is down: the next write to each Zarr finishes it
        log.exception("could not look for verified batches to apply")
    if archive is not None:
        from zarrchive.services.dandi import dois

        try:  # DOIs an outage left pending when the last process stopped
            dois.queue_pending(archive)
        except Exception:  # `zarrchive admin doi sync` sends them
            log.exception("could not queue the DOIs left pending")


#: The OpenAPI security scheme of ``Authorization: token KEY`` (``/docs``'s Authorize button).
TOKEN_SCHEME = {
    "type": "apiKey",
    "in": "header",
    "name": "Authorization",
    "description": "Type `token KEY`, KEY being the API token `zarrchive admin create-user` "
    "printed. Anonymous requests see public data only.",
}


def document_token(app: FastAPI) -> None:
    """Declare the API token in the OpenAPI document, optional on every route (anonymous
    callers read public data; the routes themselves say when they need it)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()
        components = document.setdefault("components", {})
        components["securitySchemes"] = {"token": TOKEN_SCHEME}
        document["security"] = [{}, {"token": []}]
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(archive: Archive, *, close_on_shutdown: bool = False) -> FastAPI:
    """The API over *archive* (database, object store and job queue already set up)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # batches verified before a crash are applied even if nobody writes to their Zarr
        await run_in_threadpool(_sweep_pending, archive)
        from zarrchive.services import periodic

        ticker = periodic.start_in_process(archive)  # e.g. embargo end dates, jobs in-process
        # what start-up made lives as long as the process: out of the collector's full
        # passes, which would otherwise walk it and stall every request meanwhile
        gc.freeze()
        yield
        if ticker is not None:
            ticker.stop()
        if close_on_shutdown:
            archive.close()

    app = FastAPI(
        title="zarrchive",
        version=package_version(),
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by zarrchive.web with local assets
    )
    app.state.archive = archive
    install_error_handlers(app)
    app.add_middleware(RequestGuard)
    app.add_middleware(CorsMiddleware)  # outermost: refusals of the guard carry CORS too
    app.include_router(info.router)
    app.include_router(auth.router)
    app.include_router(dandisets.router)
    app.include_router(trash.router)
    app.include_router(pinned_views.router)  # first of all: a view never reaches a live route
    app.include_router(zarrs.tree_router)  # first: {id}.zarr/{path} serves every path
    app.include_router(readers.router)  # before snapshots and zarrs: refs.json, read/
    app.include_router(snapshots.router)  # before zarrs: its routes win over the catch-all
    app.include_router(zarr_history.router)  # before zarrs, as snapshots
    app.include_router(zarrs.router)
    app.include_router(versions.router)
    app.include_router(assets.router)
    app.include_router(blob_uploads.router)
    app.include_router(owners.router)
    app.include_router(reviewers.router)
    app.include_router(users.router)
    app.include_router(audit.router)
    document_bodies(app)  # the routes read their bodies themselves
    document_token(app)
    from zarrchive.web import install_web  # the web pages import the API's error mapping
    from zarrchive.web.security_headers import SecurityHeaders

    app.add_middleware(SecurityHeaders)  # outermost: the guard's refusals get them too

    install_web(app)  # the HTML pages and /docs
    app.add_middleware(PublicAddress)  # outermost: no forged Host reaches any URL made
    return app
