"""``zarrchive serve``: start the archive.

One process by default (the embedded default: SQLite, an embedded SeaweedFS, jobs in a
background thread).  ``--workers N`` runs N API processes (uvicorn's workers, each building
its app with :func:`app_from_env`); they share nothing but the database, S3 and Redis, so
more than one needs all three outside the process: an S3 endpoint
(``ZARRCHIVE_S3_ENDPOINT_URL``), a database other than SQLite and Redis
(``ZARRCHIVE_REDIS_URL``, consumed by ``zarrchive worker`` processes).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import typer

from zarrchive.cli._common import friendly_errors
from zarrchive.config import Settings, redact_url
from zarrchive.errors import ConfigurationError

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger("zarrchive")

#: The import string of the app factory each API worker process calls.
APP_FACTORY = "zarrchive.cli.serve:app_from_env"


def check_multiprocess(settings: Settings, workers: int) -> None:
    """Refuse a configuration that more than one API process would break."""
    if workers <= 1:
        return
    missing = []
    if settings.embedded_s3:
        missing.append(
            "an S3 endpoint (ZARRCHIVE_S3_ENDPOINT_URL): the embedded SeaweedFS belongs to "
            "the single-process default"
        )
    if settings.database_url.startswith("sqlite"):
        missing.append(
            "a database server (ZARRCHIVE_DATABASE_URL=postgresql+psycopg://...): SQLite "
            "serialises every write of every process on one file"
        )
    if not settings.redis_url:
        missing.append(
            "Redis (ZARRCHIVE_REDIS_URL) and `zarrchive worker` processes: in-process jobs "
            "would run in every API process, each coalescing only its own"
        )
    if missing:
        raise ConfigurationError(
            f"--workers {workers} needs " + "; ".join(missing) + ". Without them, run one process"
        )


def app_from_env() -> FastAPI:
    """The app of one API worker process, configured from ``ZARRCHIVE_*`` (uvicorn's factory).

    The parent process has migrated the database already.
    """
    from zarrchive.api import create_app
    from zarrchive.jobs import job_queue_from_settings
    from zarrchive.services.runtime import Archive, set_current_archive

    settings = Settings.from_env()
    archive = Archive.from_settings(settings, migrate=False)
    archive.jobs = job_queue_from_settings(settings)
    set_current_archive(archive)
    log.info("API worker process %d ready", os.getpid())
    return create_app(archive, close_on_shutdown=True)


@friendly_errors
def serve(
    host: str = typer.Option(None, help="Address to listen on [env ZARRCHIVE_HOST; 127.0.0.1]"),
    port: int = typer.Option(None, help="Port to listen on [env ZARRCHIVE_PORT; 8000]"),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        help="API processes [env ZARRCHIVE_WORKERS; 1]; more than one needs an S3 endpoint, "
        "PostgreSQL and Redis (with `zarrchive worker` processes for the jobs)",
        envvar="ZARRCHIVE_WORKERS",
    ),
) -> None:
    """Start the archive: the API, background jobs and (by default) an embedded S3."""
    import uvicorn

    from zarrchive.api import create_app
    from zarrchive.jobs import job_queue_from_settings
    from zarrchive.services.runtime import Archive, set_current_archive
    from zarrchive.storage.embedded import embedded_s3

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = Settings.from_env()
    if host is not None:
        settings = settings.with_overrides(host=host)
    if port is not None:
        settings = settings.with_overrides(port=port)
    check_multiprocess(settings, workers)
    if workers > 1:
        # migrate once, here; then every worker process builds its own archive from the env
        Archive.from_settings(settings).close()
        log.info(
            "%d API processes; database %s; S3 at %s; jobs on Redis at %s",
            workers,
            redact_url(settings.database_url),
            settings.s3_endpoint_url,
            redact_url(settings.redis_url or ""),
        )
        log.info("API listening on http://%s:%d (docs at /docs)", settings.host, settings.port)
        uvicorn.run(
            APP_FACTORY,
            factory=True,
            workers=workers,
            host=settings.host,
            port=settings.port,
            log_level="info",
        )
        log.info("stopped")
        return
    with embedded_s3(settings) as resolved:
        if settings.embedded_s3:
            log.info(
                "embedded S3 (SeaweedFS) listening on %s, data in %s",
                resolved.s3_endpoint_url,
                settings.data_dir / "s3",
            )
        else:
            log.info("S3 at %s", resolved.s3_endpoint_url)
        archive = Archive.from_settings(resolved)
        archive.jobs = job_queue_from_settings(resolved)
        set_current_archive(archive)
        log.info(
            "background jobs: %s",
            f"Redis at {redact_url(resolved.redis_url)}" if resolved.redis_url else "in-process",
        )
        log.info("database: %s", redact_url(resolved.database_url))
        log.info("API listening on http://%s:%d (docs at /docs)", resolved.host, resolved.port)
        try:
            uvicorn.run(
                create_app(archive),
                host=resolved.host,
                port=resolved.port,
                log_level="info",
            )
        finally:
            archive.close()
        log.info("stopped")
