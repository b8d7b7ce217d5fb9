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
    queue: str = typer.Option(DEFAULT_QUEUE, "--queue", help="The queue to consume."),
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
        from zarrchive.jobs import run_worker

        run_worker(url, queue_name=queue, burst=burst, logging_level=log_level.upper())
    except ZarrchiveError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc
