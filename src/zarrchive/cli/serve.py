"""``zarrchive serve``: start the archive."""

from __future__ import annotations

import logging

import typer

from zarrchive.cli._common import friendly_errors
from zarrchive.config import Settings, redact_url

log = logging.getLogger("zarrchive")


@friendly_errors
def serve(
    host: str = typer.Option(None, help="Address to listen on [env ZARRCHIVE_HOST; 127.0.0.1]"),
    port: int = typer.Option(None, help="Port to listen on [env ZARRCHIVE_PORT; 8000]"),
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
