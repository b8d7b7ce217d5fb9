"""``zarrchive worker``: consume background jobs from Redis."""

from __future__ import annotations

import typer

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError, ZarrchiveError

#: The default queue name (``zarrchive.jobs.DEFAULT_QUEUE``; not imported here to keep the
#: CLI quick to start).
DEFAULT_QUEUE = "zarrchive"


def worker(
    redis_url: str | None = typer.Option(
        None, "--redis-url", help="Redis URL (default: ZARRCHIVE_REDIS_URL)."
    ),
    queue: str = typer.Option(
        DEFAULT_QUEUE,
        "--queue",
        envvar="ZARRCHIVE_REDIS_QUEUE",
        help="The queue to consume [env ZARRCHIVE_REDIS_QUEUE].",
    ),
    burst: bool = typer.Option(False, "--burst", help="Exit once the queue is empty."),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
) -> None:
    """Run background jobs (manifests, backfills) from Redis; start one per core or machine."""
    try:
        url = redis_url or Settings.from_env().redis_url
        if not url:
            raise ConfigurationError(
                "zarrchive worker needs Redis: set ZARRCHIVE_REDIS_URL or pass --redis-url "
                "(without Redis, `zarrchive serve` runs jobs in-process and needs no worker)"
            )
        from zarrchive.db.session import Database
        from zarrchive.jobs import run_worker
        from zarrchive.services import runtime
        from zarrchive.services.runtime import current_archive, set_current_archive
        from zarrchive.services.uploads import sweep_pending

        # a database server is migrated once here: the jobs (each in a forked child) connect
        # without migrating; the embedded default's SQLite file is migrated by `serve`
        database_url = Settings.from_env().database_url
        if not database_url.startswith("sqlite"):
            database = Database(database_url)
            try:
                database.migrate()
            finally:
                database.dispose()
        # batches verified before a crash are applied (their jobs may have died with it)
        try:
            sweep_pending(current_archive())
        except Exception as exc:
            typer.echo(f"warning: could not look for verified batches to apply: {exc}", err=True)
        finally:
            # jobs run in forked children: each builds its own archive, so that no database
            # connection or thread pool of this process is used across a fork
            archive = runtime._current
            if archive is not None:
                archive.close()
                set_current_archive(None)
        run_worker(url, queue_name=queue, burst=burst, logging_level=log_level.upper())
    except ZarrchiveError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc
