"""``zarrchive worker``: consume background jobs from Redis, every lane or the ones named."""

from __future__ import annotations

import typer

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError, ZarrchiveError

#: The lanes (``zarrchive.jobs.JobLane``'s values; not imported here to keep the CLI quick
#: to start).
LANES = ("zarr", "content")


def worker(
    redis_url: str | None = typer.Option(
        None, "--redis-url", help="Redis URL (default: ZARRCHIVE_REDIS_URL)."
    ),
    queue: list[str] = typer.Option(
        [],
        "--queue",
        help="A lane to consume: zarr (a Zarr's apply, manifests, unembargo) or content "
        "(conversions, validations, hashing), or its RQ queue ($ZARRCHIVE_REDIS_QUEUE, "
        "$ZARRCHIVE_REDIS_QUEUE-content); repeat for several [default: every lane].",
    ),
    burst: bool = typer.Option(False, "--burst", help="Exit once the queues are empty."),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
) -> None:
    """Run background jobs from Redis; start one per core or machine, and some on
    `--queue zarr` alone so that a Zarr's jobs never wait behind a long conversion."""
    try:
        settings = Settings.from_env()
        url = redis_url or settings.redis_url
        if not url:
            raise ConfigurationError(
                "zarrchive worker needs Redis: set ZARRCHIVE_REDIS_URL or pass --redis-url "
                "(without Redis, `zarrchive serve` runs jobs in-process and needs no worker)"
            )
        from zarrchive.jobs import JobLane, lane_for_name

        lanes = list(JobLane)
        if queue:
            named = [lane_for_name(name, settings.redis_queue) for name in queue]
            unknown = [name for name, lane in zip(queue, named, strict=True) if lane is None]
            if unknown:
                queues = ", ".join(lane.queue_name(settings.redis_queue) for lane in JobLane)
                raise ConfigurationError(
                    f"--queue {unknown[0]!r} names no lane: give {' or '.join(LANES)} (or their "
                    f"RQ queues {queues}, named after ZARRCHIVE_REDIS_QUEUE)"
                )
            lanes = [lane for lane in named if lane is not None]
        from zarrchive.db.session import Database
        from zarrchive.jobs import run_worker
        from zarrchive.services.runtime import close_current_archive, current_archive
        from zarrchive.services.zarr_engine.uploads import sweep_pending

        # a database server is migrated once here: the jobs (each in a forked child) connect
        # without migrating; the embedded default's SQLite file is migrated by `serve`
        database_url = settings.database_url
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
            close_current_archive()
        if JobLane.CONTENT in lanes:
            # validations run there, each job in a forked child: dandischema (seconds to
            # import, 12-14 s under load) imported once here is already every child's
            from zarrchive.services.dandi.validation import schema

            schema()
        from zarrchive.services.periodic import PERIODIC_JOBS

        run_worker(
            url,
            queue_name=settings.redis_queue,
            lanes=lanes,
            burst=burst,
            logging_level=log_level.upper(),
            periodic=PERIODIC_JOBS,  # e.g. embargo end dates (one worker queues each check)
        )
    except ZarrchiveError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc
